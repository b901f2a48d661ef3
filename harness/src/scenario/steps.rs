//! The cluster state after each step of a scenario: the initial objects with every earlier
//! step's changes applied, as the API server would hold them.

use super::field_path::{split_ref, FieldPath};
use super::model::{Probe, Scenario, Step};

/// A scenario as it stands at one point of its steps.
#[derive(Debug, Clone)]
pub struct StepState {
    /// The objects after the step, with the step's probes as `probes` (source ports fixed by
    /// each probe's place in the whole scenario) and no steps.
    pub scenario: Scenario,
    /// Where each service of `scenario` was written in the file.
    pub(crate) service_origins: Vec<FieldPath>,
    /// Where each explicit EndpointSlice was written.
    pub(crate) slice_origins: Vec<FieldPath>,
    /// Where each pod was written (in `topology.pods`, or a step's `apply.pods`).
    pub(crate) pod_origins: Vec<FieldPath>,
}

/// The name of step `index` (0-based) as reports print it.
pub fn step_name(step: &Step, index: usize) -> String {
    if step.name.is_empty() {
        format!("step-{}", index + 1)
    } else {
        step.name.clone()
    }
}

/// The position of the first probe of step `index` among all the scenario's probes (initial
/// ones first), which fixes its default source port.
pub fn first_probe_index(s: &Scenario, index: usize) -> usize {
    s.probes.len()
        + s.steps[..index]
            .iter()
            .map(|st| st.probes.len())
            .sum::<usize>()
}

/// The initial state (`None`) or the state after step `index`.
pub fn state_at(s: &Scenario, index: Option<usize>) -> StepState {
    let root = |key: &str, i: usize| FieldPath::root(key).idx(i);
    let mut state = StepState {
        scenario: Scenario {
            steps: Vec::new(),
            ..s.clone()
        },
        service_origins: (0..s.services.len()).map(|i| root("services", i)).collect(),
        slice_origins: (0..s.endpoint_slices.len())
            .map(|i| root("endpointSlices", i))
            .collect(),
        pod_origins: (0..s.topology.pods.len())
            .map(|i| FieldPath::root("topology").key("pods").idx(i))
            .collect(),
    };
    let Some(last) = index else {
        return state;
    };
    for (k, step) in s.steps.iter().enumerate().take(last + 1) {
        apply_step(&mut state, step, k);
    }
    let first = first_probe_index(s, last);
    state.scenario.probes = s.steps[last]
        .probes
        .iter()
        .enumerate()
        .map(|(i, p)| with_fixed_port(p, first + i))
        .collect();
    state
}

/// A probe's default source port depends on its index; a step's probe keeps the one of its
/// place in the whole scenario, so no two probes of a scenario share IPVS connection entries.
fn with_fixed_port(p: &Probe, global_index: usize) -> Probe {
    let mut p = p.clone();
    if p.source_port.is_none() {
        p.source_port = u16::try_from(p.first_source_port(global_index)).ok();
    }
    p
}

fn apply_step(state: &mut StepState, step: &Step, k: usize) {
    let here = FieldPath::root("steps").idx(k);
    for reference in &step.delete.services {
        let (ns, name) = split_ref(reference);
        let services = &mut state.scenario.services;
        if let Some(i) = services
            .iter()
            .position(|svc| svc.namespace == ns && svc.name == name)
        {
            services.remove(i);
            state.service_origins.remove(i);
        }
        remove_slices(state, ns, name);
    }
    for reference in &step.delete.endpoint_slices {
        let (ns, name) = split_ref(reference);
        remove_slices(state, ns, name);
    }
    for reference in &step.delete.pods {
        let (ns, name) = split_ref(reference);
        let pods = &mut state.scenario.topology.pods;
        if let Some(i) = pods
            .iter()
            .position(|p| p.name == name && p.namespace == ns)
        {
            pods.remove(i);
            state.pod_origins.remove(i);
        }
    }
    // Pods a step creates come after its deletions, so a pod deleted and created again in one
    // step is a new pod. A pod whose name is still taken is left out (validation says so).
    for (j, pod) in step.apply.pods.iter().enumerate() {
        let pods = &mut state.scenario.topology.pods;
        if pods.iter().any(|p| p.name == pod.name) {
            continue;
        }
        pods.push(pod.clone());
        state.pod_origins.push(here.key("apply").key("pods").idx(j));
    }
    for (j, svc) in step.apply.services.iter().enumerate() {
        let origin = here.key("apply").key("services").idx(j);
        let services = &mut state.scenario.services;
        match services
            .iter()
            .position(|x| x.namespace == svc.namespace && x.name == svc.name)
        {
            Some(i) => {
                services[i] = svc.clone();
                state.service_origins[i] = origin;
            }
            None => {
                services.push(svc.clone());
                state.service_origins.push(origin);
            }
        }
    }
    // Every explicit slice of a Service the step writes slices for is replaced by them.
    for slice in &step.apply.endpoint_slices {
        remove_slices(state, &slice.namespace, &slice.service);
    }
    for (j, slice) in step.apply.endpoint_slices.iter().enumerate() {
        state.scenario.endpoint_slices.push(slice.clone());
        state
            .slice_origins
            .push(here.key("apply").key("endpointSlices").idx(j));
    }
}

fn remove_slices(state: &mut StepState, ns: &str, service: &str) {
    let slices = &mut state.scenario.endpoint_slices;
    let mut i = 0;
    while i < slices.len() {
        if slices[i].namespace == ns && slices[i].service == service {
            slices.remove(i);
            state.slice_origins.remove(i);
        } else {
            i += 1;
        }
    }
}
