//! A Service's ClusterIPs and IP families, checked as the API server does on create:
//! `ValidateServiceClusterIPsRelatedFields` (pkg/apis/core/validation/validation.go) for the
//! fields themselves, then `initIPFamilyFields` (pkg/registry/core/service/storage/alloc.go) for
//! what the cluster can give. kpct allocates no ClusterIP, so every family the Service ends up
//! with needs its address in `clusterIPs`.

use super::{Checker, FieldPath};
use crate::scenario::family::{IpFamily, IpFamilyPolicy};
use crate::scenario::model::{Scenario, Service, ServiceType, IPV4_FORM};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// The families the API server gives `svc` on `s`'s cluster (`allocated_families`), primary
/// first, for a Service that passed validation (its problems are dropped); empty for an
/// ExternalName Service.
pub(crate) fn service_ip_families(s: &Scenario, svc: &Service) -> Vec<IpFamily> {
    if svc.spec.type_ == ServiceType::ExternalName {
        return Vec::new();
    }
    let mut checker = Checker {
        s,
        known: super::KnownProxiers::Any,
        issues: Vec::new(),
    };
    checker.allocated_families(&FieldPath::root("spec"), svc, &svc.cluster_ips())
}

impl Checker<'_> {
    /// `clusterIP`, `clusterIPs`, `ipFamilies` and `ipFamilyPolicy` of services[i];
    /// `seen` holds the ClusterIPs of earlier services.
    pub(super) fn service_families(
        &mut self,
        spec: &FieldPath,
        svc: &Service,
        i: usize,
        seen: &mut BTreeMap<IpAddr, usize>,
    ) {
        let s = &svc.spec;
        if s.type_ == ServiceType::ExternalName {
            for (field, set) in [
                ("clusterIPs", !s.cluster_ips.is_empty()),
                ("ipFamilies", !s.ip_families.is_empty()),
                ("ipFamilyPolicy", s.ip_family_policy.is_some()),
            ] {
                if set {
                    self.err(spec.key(field), "must not be set for type ExternalName");
                }
            }
            return;
        }
        let Some(texts) = self.cluster_ip_texts(spec, svc) else {
            return;
        };
        let headless = texts.first().map(String::as_str) == Some("None");
        if headless {
            if texts.len() > 1 {
                self.err(
                    spec.key("clusterIPs"),
                    "'None' must be the first and only value",
                );
            }
            if s.type_ != ServiceType::ClusterIP {
                self.err(
                    spec.key("clusterIP"),
                    format!(
                        "a headless service (clusterIP: None) cannot be of type {:?}",
                        s.type_
                    ),
                );
            }
        }
        let ips = if headless {
            Vec::new()
        } else {
            match self.parse_cluster_ips(spec, svc, &texts) {
                Some(ips) => ips,
                None => return,
            }
        };
        self.families_match(spec, svc, &ips);
        let families = self.allocated_families(spec, svc, &ips);
        if !headless {
            // Where the file lists no clusterIPs, the policy is what asks for another family.
            let path = if s.cluster_ips.is_empty() {
                spec.key("ipFamilyPolicy")
            } else {
                spec.key("clusterIPs")
            };
            for family in families.iter().skip(ips.len()) {
                self.err(
                    path.clone(),
                    format!(
                        "the Service gets an {family} ClusterIP on this cluster (ipFamilyPolicy \
                         {:?}), and kpct allocates none: list it in clusterIPs",
                        s.ip_family_policy.unwrap_or_default()
                    ),
                );
            }
        }
        for (k, ip) in ips.iter().enumerate() {
            self.cluster_ip_in_range(spec, svc, k, *ip, i, seen);
        }
    }

    /// The ClusterIPs as written: `clusterIPs`, or `clusterIP` alone (as the API server's
    /// strategy fills one from the other); `None` when neither is set.
    fn cluster_ip_texts(&mut self, spec: &FieldPath, svc: &Service) -> Option<Vec<String>> {
        let s = &svc.spec;
        match (&s.cluster_ip, s.cluster_ips.as_slice()) {
            (None, []) => {
                let ranges = self
                    .s
                    .topology
                    .service_cidr
                    .to_string()
                    .replace(',', " or ");
                self.err(
                    spec.key("clusterIP"),
                    format!(
                        "clusterIP is required: an address inside serviceCIDR {ranges}, or \
                         \"None\" for a headless service"
                    ),
                );
                None
            }
            (Some(one), []) => Some(vec![one.clone()]),
            (first, all) => {
                if first.as_ref().is_some_and(|f| *f != all[0]) {
                    self.err(spec.key("clusterIPs"), "first value must match `clusterIP`");
                }
                if all.len() > 2 {
                    self.err(spec.key("clusterIPs"), "may only hold up to 2 values");
                    return None;
                }
                Some(all.to_vec())
            }
        }
    }

    /// Parses each ClusterIP; `None` when one is no address, or two are of one family.
    fn parse_cluster_ips(
        &mut self,
        spec: &FieldPath,
        svc: &Service,
        texts: &[String],
    ) -> Option<Vec<IpAddr>> {
        // Where a lone `clusterIP` is written, problems point at it.
        let path = |k: usize| {
            if svc.spec.cluster_ips.is_empty() {
                spec.key("clusterIP")
            } else {
                spec.key("clusterIPs").idx(k)
            }
        };
        let mut ips = Vec::new();
        for (k, text) in texts.iter().enumerate() {
            match text.parse::<IpAddr>() {
                Ok(ip) => ips.push(ip),
                Err(_) => self.err(
                    path(k),
                    format!("`{text}` is neither an IP address (IPv4: {IPV4_FORM}) nor \"None\""),
                ),
            }
        }
        if ips.len() < texts.len() {
            return None;
        }
        if let [a, b] = ips.as_slice() {
            if IpFamily::of(*a) == IpFamily::of(*b) {
                self.err(
                    spec.key("clusterIPs"),
                    "may specify no more than one IP for each IP family",
                );
                return None;
            }
        }
        Some(ips)
    }

    /// `ipFamilies` on its own, then against `clusterIPs`.
    fn families_match(&mut self, spec: &FieldPath, svc: &Service, ips: &[IpAddr]) {
        let families = &svc.spec.ip_families;
        if families.len() > 2 {
            self.err(spec.key("ipFamilies"), "may only hold up to 2 values");
        }
        for (k, family) in families.iter().enumerate() {
            if families[..k].contains(family) {
                self.err(
                    spec.key("ipFamilies").idx(k),
                    format!("Duplicate value: \"{family}\""),
                );
            }
        }
        for (k, (ip, family)) in ips.iter().zip(families).enumerate() {
            if IpFamily::of(*ip) != *family {
                self.err(
                    spec.key("clusterIPs").idx(k),
                    format!("expected an {family} value as indicated by `ipFamilies[{k}]`"),
                );
            }
        }
    }

    /// The families the API server gives the Service (`initIPFamilyFields`): those of its
    /// ClusterIPs and `ipFamilies`, the cluster's default when none, and the other family
    /// where the policy asks for both and the cluster has them.
    fn allocated_families(
        &mut self,
        spec: &FieldPath,
        svc: &Service,
        ips: &[IpAddr],
    ) -> Vec<IpFamily> {
        let s = &svc.spec;
        let mut families: Vec<IpFamily> = s.ip_families.clone();
        for ip in ips.iter().skip(families.len()) {
            families.push(IpFamily::of(*ip));
        }
        families.dedup();
        let service_cidr = self.s.topology.service_cidr;
        let dual_cluster = service_cidr.is_dual();
        let policy = match s.ip_family_policy {
            Some(policy) => policy,
            None => {
                if families.len() == 2 {
                    self.err(
                        spec.key("ipFamilyPolicy"),
                        "must be RequireDualStack or PreferDualStack when multiple 'ipFamilies' \
                         are specified",
                    );
                }
                IpFamilyPolicy::SingleStack
            }
        };
        if policy == IpFamilyPolicy::SingleStack && families.len() == 2 {
            if s.ip_family_policy.is_some() {
                self.err(
                    spec.key("ipFamilyPolicy"),
                    "SingleStack allows one family, and the Service has two",
                );
            }
            families.truncate(1);
        }
        if policy == IpFamilyPolicy::RequireDualStack && !dual_cluster {
            self.err(
                spec.key("ipFamilyPolicy"),
                format!(
                    "this cluster is not configured for dual-stack services (topology.serviceCIDR \
                     has no {} range)",
                    service_cidr.primary_family().other()
                ),
            );
        }
        for (k, family) in families.iter().enumerate() {
            if !service_cidr.has(*family) {
                let path = if s.ip_families.len() > k {
                    spec.key("ipFamilies").idx(k)
                } else if s.cluster_ips.is_empty() {
                    spec.key("clusterIP")
                } else {
                    spec.key("clusterIPs").idx(k)
                };
                self.err(
                    path,
                    format!(
                        "{family} is not configured on this cluster (topology.serviceCIDR has no \
                         {family} range)"
                    ),
                );
            }
        }
        if families.is_empty() {
            // The API server's default: the cluster's first service family.
            families.push(service_cidr.primary_family());
        }
        if policy != IpFamilyPolicy::SingleStack && families.len() == 1 && dual_cluster {
            families.push(families[0].other());
        }
        families
    }

    /// A ClusterIP lies in its family's service range and is no other Service's.
    fn cluster_ip_in_range(
        &mut self,
        spec: &FieldPath,
        svc: &Service,
        k: usize,
        ip: IpAddr,
        i: usize,
        seen: &mut BTreeMap<IpAddr, usize>,
    ) {
        let path = if svc.spec.cluster_ips.is_empty() {
            spec.key("clusterIP")
        } else {
            spec.key("clusterIPs").idx(k)
        };
        // An IPv6 address without an IPv6 range is reported by `allocated_families`.
        let range = self.s.topology.service_cidr.of(IpFamily::of(ip));
        if let Some(range) = range.filter(|r| !r.contains(ip)) {
            self.err(
                path,
                format!("clusterIP {ip} is outside serviceCIDR {range}"),
            );
            return;
        }
        if let Some(first) = seen.insert(ip, i) {
            seen.insert(ip, first);
            self.err(
                path,
                format!("clusterIP {ip} is already used by services[{first}]"),
            );
        }
    }
}
