//! The Kubernetes API server kpct serves to real proxiers (being built).
