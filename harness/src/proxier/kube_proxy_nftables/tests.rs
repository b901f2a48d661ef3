use super::names::{endpoint_names, ServiceChains};

#[test]
fn names_match_upstream_tests() {
    // pkg/proxy/nftables/proxier_test.go: `service-ULMVA6XW-ns1/svc1/tcp/p80`,
    // `endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80`.
    assert_eq!(
        ServiceChains::new("ns1", "svc1", "tcp", "p80").cluster_policy,
        "service-ULMVA6XW-ns1/svc1/tcp/p80"
    );
    assert_eq!(
        endpoint_names("ns1", "svc1", "tcp", "p80", "10.180.0.1", 80).0,
        "endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"
    );
}
