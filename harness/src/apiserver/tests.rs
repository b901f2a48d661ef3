//! Tests of the server as a whole, through raw HTTP.
