use super::PortRange;

#[test]
fn port_ranges_parse_as_the_api_server_takes_them() {
    assert_eq!(
        "3000-3100".parse(),
        Ok(PortRange {
            first: 3000,
            last: 3100
        })
    );
    assert_eq!(
        "3000+100".parse(),
        Ok(PortRange {
            first: 3000,
            last: 3100
        })
    );
    assert_eq!(PortRange::DEFAULT_NODE_PORTS.to_string(), "30000-32767");
    for bad in ["3000", "a-b", "3100-3000", "0-10", "65000+1000"] {
        assert!(bad.parse::<PortRange>().is_err(), "{bad}");
    }
}
