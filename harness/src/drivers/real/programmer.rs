//! Both kinds of real proxier as a run drives them: each a [`NodeProgrammer`] whose run is a
//! session ([`super::session`]) of an API server and one process per node.

use super::session::{Program, RealRun};
use super::{ApiProxier, RealProxier};
use crate::drivers::programmer::{NodeProgrammer, RunProgrammer};
use crate::scenario::Scenario;
use anyhow::Result;

impl NodeProgrammer for RealProxier {
    fn label(&self) -> String {
        self.spec.clone()
    }

    /// Sets, not sequences, in every mode: iptables and nftables pick backends at random, and
    /// IPVS mode's round robin follows the order kube-proxy added the real servers in, which
    /// is a Go map's (random) order.
    fn random_choice(&self) -> bool {
        true
    }

    fn needs_ipvs(&self) -> bool {
        self.mode == super::Mode::Ipvs
    }

    fn expectations_of(&self) -> String {
        self.judged_as()
    }

    fn scenario_problem(&self, scenario: &Scenario) -> Option<String> {
        let problems = super::config::unexpressible(self.mode, &scenario.proxier);
        (!problems.is_empty()).then(|| problems.join("; "))
    }

    fn begin<'a>(&'a self, scenario: &Scenario) -> Result<Box<dyn RunProgrammer + 'a>> {
        Ok(Box::new(RealRun::start(
            Program::KubeProxy(self),
            scenario,
        )?))
    }
}

impl NodeProgrammer for ApiProxier {
    fn label(&self) -> String {
        self.spec.clone()
    }

    /// Sets: nothing says how an unknown proxier picks backends.
    fn random_choice(&self) -> bool {
        true
    }

    fn expectations_of(&self) -> String {
        self.judged_as.clone().unwrap_or_else(|| self.label())
    }

    /// A scenario that sets proxier options: an `api:` proxier is told only what its command
    /// line's placeholders say, so it would be judged on settings it never had.
    fn scenario_problem(&self, scenario: &Scenario) -> Option<String> {
        let set = super::api::options_set(&scenario.proxier);
        (!set.is_empty()).then(|| {
            format!(
                "the scenario sets proxier options an `api:` proxier is not told of ({}): give \
                 them on its command line and run the scenario with them removed",
                set.join(", ")
            )
        })
    }

    fn begin<'a>(&'a self, scenario: &Scenario) -> Result<Box<dyn RunProgrammer + 'a>> {
        Ok(Box::new(RealRun::start(Program::Api(self), scenario)?))
    }
}
