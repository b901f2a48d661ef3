//! The README's scenario field reference, read from the schema itself: every object of the
//! format with the fields its deserializer accepts (each type denies unknown fields, and serde
//! names the ones it expects), so a field added to the model appears here, and the test that
//! keeps the README in sync fails until it is documented.

use super::model::*;
use serde::de::DeserializeOwned;

/// The fields `T` accepts, in declaration order.
pub fn fields_of<T: DeserializeOwned>() -> Vec<String> {
    const PROBE: &str = "kpct-no-such-field";
    let message = match serde_yaml_ng::from_str::<T>(&format!("{PROBE}: 1")) {
        Ok(_) => return Vec::new(),
        Err(e) => e.to_string(),
    };
    // "unknown field `kpct-no-such-field`, expected one of `a`, `b`" or "…, expected `a`".
    let Some((_, expected)) = message.split_once("expected ") else {
        return Vec::new();
    };
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Every object of the scenario format: where it sits (a field path, `[]` for list items) and
/// the fields it accepts.
pub fn objects() -> Vec<(&'static str, Vec<String>)> {
    vec![
        ("(the file)", fields_of::<Scenario>()),
        ("topology", fields_of::<Topology>()),
        ("topology.nodes[]", fields_of::<Node>()),
        ("topology.pods[]", fields_of::<Pod>()),
        ("topology.pods[].ports[]", fields_of::<ContainerPort>()),
        ("topology.external", fields_of::<External>()),
        ("services[]", fields_of::<Service>()),
        ("services[].spec", fields_of::<ServiceSpec>()),
        ("services[].spec.ports[]", fields_of::<ServicePort>()),
        (
            "services[].spec.sessionAffinityConfig",
            fields_of::<SessionAffinityConfig>(),
        ),
        (
            "services[].spec.sessionAffinityConfig.clientIP",
            fields_of::<ClientIpConfig>(),
        ),
        ("services[].status", fields_of::<ServiceStatus>()),
        (
            "services[].status.loadBalancer",
            fields_of::<LoadBalancerStatus>(),
        ),
        (
            "services[].status.loadBalancer.ingress[]",
            fields_of::<LoadBalancerIngress>(),
        ),
        ("endpointSlices[]", fields_of::<EndpointSlice>()),
        ("endpointSlices[].ports[]", fields_of::<EndpointPort>()),
        ("endpointSlices[].endpoints[]", fields_of::<Endpoint>()),
        (
            "endpointSlices[].endpoints[].conditions",
            fields_of::<EndpointConditions>(),
        ),
        ("proxier", fields_of::<ProxierOptions>()),
        ("proxier.ipvsTimeouts", fields_of::<IpvsTimeouts>()),
        ("probes[]", fields_of::<Probe>()),
        ("probes[].from", fields_of::<ProbeSource>()),
        ("probes[].to", fields_of::<ProbeTarget>()),
        (
            "probes[].expect, probes[].expectFor.PROXIER",
            fields_of::<Expectation>(),
        ),
        ("steps[]", fields_of::<Step>()),
        ("steps[].apply", fields_of::<Objects>()),
        ("steps[].delete", fields_of::<Deletions>()),
    ]
}

/// The reference as a markdown table.
pub fn field_reference() -> String {
    let mut out = String::from("| object | fields |\n|---|---|\n");
    for (path, fields) in objects() {
        let list: Vec<String> = fields.iter().map(|f| format!("`{f}`")).collect();
        out.push_str(&format!("| `{path}` | {} |\n", list.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_object_names_its_fields() {
        for (path, fields) in objects() {
            assert!(!fields.is_empty(), "{path}: no fields read from the schema");
        }
        assert!(fields_of::<Probe>().contains(&"expectFor".to_string()));
        assert!(fields_of::<Node>().contains(&"secondaryIPs".to_string()));
    }
}
