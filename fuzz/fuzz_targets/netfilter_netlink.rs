#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kpct::fuzz_surfaces::netfilter_netlink(data));
