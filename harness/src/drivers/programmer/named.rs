//! `NAME=SPEC`: a proxier under a name of the user's choosing, so that two that differ only in
//! a flag (`v1=exec:./p`, `v2=exec:./p --fast`) are told apart in every output while the full
//! spec stays at hand for the commands that run it again.

use super::{NodeProgrammer, RunProgrammer};
use crate::scenario::Scenario;
use anyhow::{bail, Result};

/// `inner` labelled `name`.
pub struct Named {
    name: String,
    spec: String,
    inner: Box<dyn NodeProgrammer>,
}

impl Named {
    /// `NAME=SPEC` split, when `spec` has that form: a NAME of letters, digits, `.`, `_` and `-`
    /// before the first `=` (a built-in, `exec:…` or `kube-proxy:…` has a `:` or nothing there).
    pub fn split(spec: &str) -> Option<(&str, &str)> {
        let (name, rest) = spec.split_once('=')?;
        let plain = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        plain.then_some((name, rest))
    }

    /// `inner`, built from `SPEC` of `NAME=SPEC`, labelled `NAME`.
    pub fn new(name: &str, spec: &str, inner: Box<dyn NodeProgrammer>) -> Result<Named> {
        if inner.label() == name {
            bail!("proxier `{name}={spec}`: the name is the label it has anyway");
        }
        Ok(Named {
            name: name.to_string(),
            spec: format!("{name}={spec}"),
            inner,
        })
    }
}

impl NodeProgrammer for Named {
    fn label(&self) -> String {
        self.name.clone()
    }
    fn spec(&self) -> String {
        self.spec.clone()
    }
    fn random_choice(&self) -> bool {
        self.inner.random_choice()
    }
    fn needs_ipvs(&self) -> bool {
        self.inner.needs_ipvs()
    }
    fn health_check_addresses(
        &self,
        ctx: &crate::scenario::cluster::NodeContext,
        options: &crate::scenario::ProxierOptions,
    ) -> Option<Vec<std::net::IpAddr>> {
        self.inner.health_check_addresses(ctx, options)
    }
    fn steps_problem(&self, scenario: &Scenario) -> Option<String> {
        self.inner.steps_problem(scenario)
    }
    /// The inner proxier's: a built-in named otherwise is still judged as that built-in.
    fn expectations_of(&self) -> String {
        self.inner.expectations_of()
    }
    fn scenario_problem(&self, scenario: &Scenario) -> Option<String> {
        self.inner.scenario_problem(scenario)
    }
    fn begin<'a>(&'a self, scenario: &Scenario) -> Result<Box<dyn RunProgrammer + 'a>> {
        self.inner.begin(scenario)
    }
}

#[cfg(test)]
mod tests {
    use super::Named;

    #[test]
    fn only_a_plain_name_before_the_first_equals_sign_names() {
        assert_eq!(
            Named::split("v2=exec:./p --fast"),
            Some(("v2", "exec:./p --fast"))
        );
        assert_eq!(Named::split("exec:./p --x=y"), None);
        assert_eq!(Named::split("kube-proxy-iptables"), None);
        assert_eq!(Named::split("=exec:./p"), None);
        assert_eq!(
            Named::split("kp-1.37=kube-proxy:nftables:v1.37.2"),
            Some(("kp-1.37", "kube-proxy:nftables:v1.37.2"))
        );
    }
}
