//! `lab up` leaves a programmed topology reachable with `ip netns exec`, where the design
//! notes' troubleshooting commands work; `lab down` removes all of it.

mod common;

use kpct::builtin;
use kpct::kernel_features::require_ipvs;
use std::process::Command;

/// The IPv6-only twin of [`scenario`]: every address IPv6, ClusterIP fd00:10:96::2d.
fn scenario6(name: &str) -> kpct::Scenario {
    let text = format!(
        r#"
name: {name}
topology:
  underlay: fd00:192:168:1::/64
  clusterCIDR: fd00:10:244::/56
  serviceCIDR: fd00:10:96::/112
  nodes:
    - {{ name: node-a, ip: "fd00:192:168:1::10", podCIDR: "fd00:10:244:1::/64" }}
  pods:
    - {{ name: web-1, node: node-a, ip: "fd00:10:244:1::10", labels: {{ app: web }}, ports: [{{ containerPort: 8080 }}] }}
services:
  - name: web
    spec: {{ type: NodePort, clusterIP: "fd00:10:96::2d", selector: {{ app: web }}, ports: [{{ port: 80, targetPort: 8080, nodePort: 30080 }}] }}
"#
    );
    kpct::scenario::parse(&text, &format!("{name}.yaml")).unwrap()
}

fn scenario(name: &str) -> kpct::Scenario {
    let text = format!(
        r#"
name: {name}
topology:
  underlay: 192.168.1.0/24
  clusterCIDR: 10.244.0.0/16
  nodes:
    - {{ name: node-a, ip: 192.168.1.10, podCIDR: 10.244.1.0/24 }}
  pods:
    - {{ name: web-1, node: node-a, ip: 10.244.1.10, labels: {{ app: web }}, ports: [{{ containerPort: 8080 }}] }}
services:
  - name: web
    spec: {{ type: NodePort, clusterIP: 10.96.123.45, selector: {{ app: web }}, ports: [{{ port: 80, targetPort: 8080, nodePort: 30080 }}] }}
"#
    );
    kpct::scenario::parse(&text, &format!("{name}.yaml")).unwrap()
}

fn in_node(lab: &kpct::operations::lab::Lab, cmd: &[&str]) -> String {
    let (_, ns) = lab
        .namespaces
        .iter()
        .find(|(r, _)| r == "node node-a")
        .unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(cmd)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Labs outlive their process by design, so a failing assertion must still take this one down.
struct DownOnDrop(String);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        let _ = kpct::operations::lab::down(&self.0);
    }
}

async fn up_check_down(proxier: &str, check: &[(&[&str], &str)]) {
    up_check_down_of(scenario, "", proxier, check).await
}

/// `lab up` of the scenario `make` names, its troubleshooting commands, the `check`s, `lab down`.
/// `tag` keeps the lab's name apart from another test's lab of the same proxier.
async fn up_check_down_of(
    make: fn(&str) -> kpct::Scenario,
    tag: &str,
    proxier: &str,
    check: &[(&[&str], &str)],
) {
    let name = format!("labtest-{}-{tag}{}", std::process::id(), proxier);
    let s = make(&name);
    let _guard = DownOnDrop(name.clone());
    let lab = kpct::operations::lab::up(&s, builtin(proxier).unwrap().as_ref())
        .await
        .unwrap();
    assert_eq!(
        kpct::operations::lab::existing(&name).unwrap().len(),
        3,
        "fabric, node and pod are up"
    );
    let instructions = kpct::operations::lab::instructions(&lab);
    assert!(instructions.contains("ip netns exec"), "{instructions}");
    assert!(
        instructions.contains("no backends are running"),
        "says that nothing listens in the pods: {instructions}"
    );
    // Every troubleshooting command the lab prints works on what this proxier programmed.
    // (`in_node` asserts that each succeeds.)
    let expected = match proxier {
        "kube-proxy-ipvs" => kpct::operations::lab::Dataplane::Ipvs,
        "kube-proxy-nftables" => kpct::operations::lab::Dataplane::Nftables,
        _ => kpct::operations::lab::Dataplane::Iptables,
    };
    assert_eq!(lab.dataplane, expected, "read from what the nodes hold");
    for cmd in kpct::operations::lab::troubleshooting(lab.dataplane, &lab.families) {
        in_node(&lab, &cmd.split(' ').collect::<Vec<_>>());
    }
    // The lab outlives its creator's cleanup registry, and `kpct cleanup` leaves it alone.
    assert!(kpct::netns::leftovers(false)
        .unwrap()
        .iter()
        .all(|n| !n.contains(&name)));
    for (cmd, expected) in check {
        let out = in_node(&lab, cmd);
        assert!(
            out.contains(expected),
            "`{}` shows {expected}:\n{out}",
            cmd.join(" ")
        );
    }
    kpct::operations::lab::down(&name).unwrap();
    assert_eq!(
        kpct::operations::lab::existing(&name).unwrap(),
        Vec::<String>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lab_with_nftables_proxier_answers_troubleshooting_commands() {
    up_check_down(
        "kube-proxy-nftables",
        &[(
            &["nft", "list", "map", "ip", "kube-proxy", "service-ips"],
            "10.96.123.45 . tcp . 80 : goto service-",
        )],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lab_with_iptables_proxier_answers_troubleshooting_commands() {
    up_check_down(
        "kube-proxy-iptables",
        &[
            (
                &["iptables", "-t", "nat", "-L", "KUBE-SERVICES", "-n", "-v"],
                "10.96.123.45",
            ),
            (&["conntrack", "-L"], ""),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_lab_with_ipvs_proxier_answers_troubleshooting_commands() {
    require_ipvs();
    up_check_down(
        "kube-proxy-ipvs",
        &[
            (&["ipvsadm", "-Ln"], "TCP  10.96.123.45:80 rr"),
            (&["ipvsadm", "-Ln"], "-> 10.244.1.10:8080"),
            (
                &["iptables", "-t", "nat", "-L", "KUBE-SERVICES", "-n", "-v"],
                "KUBE-NODE-PORT",
            ),
            (&["ip", "addr", "show", "kube-ipvs0"], "10.96.123.45/32"),
        ],
    )
    .await;
}

/// Lab names match exactly: `lab down X` leaves lab `X-more` up, `lab up X-more` is not refused
/// because `X` is up, and `lab list` names both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lab_names_match_exactly() {
    let short = format!("labname-{}", std::process::id());
    let long = format!("{short}-more");
    let (_g1, _g2) = (DownOnDrop(short.clone()), DownOnDrop(long.clone()));
    let proxier = builtin("kube-proxy-iptables").unwrap();
    kpct::operations::lab::up(&scenario(&short), proxier.as_ref())
        .await
        .unwrap();
    kpct::operations::lab::up(&scenario(&long), proxier.as_ref())
        .await
        .expect("another lab whose name starts like an existing one");
    let labs = kpct::operations::lab::list().unwrap();
    assert!(labs.contains(&short) && labs.contains(&long), "{labs:?}");
    assert_eq!(kpct::operations::lab::existing(&short).unwrap().len(), 3);
    let removed = kpct::operations::lab::down(&short).unwrap();
    assert_eq!(removed.len(), 3, "{removed:?}");
    assert_eq!(
        kpct::operations::lab::existing(&long).unwrap().len(),
        3,
        "the other lab is still up"
    );
    kpct::operations::lab::down(&long).unwrap();
}

/// `text` as the scenario file `<tmp>/NAME/NAME.yaml` (a file's name is its scenario's);
/// returns the directory, to remove, and the file.
fn scenario_file(name: &str, text: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

/// `lab up` interrupted at any point leaves nothing of the half-built lab (its namespaces are
/// the process's own until the lab is complete), so the next `lab up` is not refused.
#[test]
fn an_interrupted_lab_up_leaves_nothing() {
    let name = format!("labsig-{}", std::process::id());
    let pods: String = (0..40)
        .map(|i| {
            format!(
                "    - {{ name: web-{i}, node: node-a, ip: 10.244.1.{}, labels: {{ app: web }}, ports: [{{ containerPort: 8080 }}] }}\n",
                i + 10
            )
        })
        .collect();
    let (dir, file) = scenario_file(
        &name,
        &format!(
            "# A lab to interrupt.\nname: {name}\ntopology:\n  underlay: 192.168.1.0/24\n  clusterCIDR: 10.244.0.0/16\n  nodes:\n    - {{ name: node-a, ip: 192.168.1.10, podCIDR: 10.244.1.0/24 }}\n  pods:\n{pods}services: []\n"
        ),
    );
    let _guard = DownOnDrop(name.clone());
    let prefix = kpct::netns::naming::RunPrefix::lab(&name);
    // fabric + node + 40 pods. Each signal is sent once the build has made that many namespaces
    // (inotify, not a delay): below the total the run is mid-build by construction.
    const NAMESPACES: usize = 42;
    for (i, &count) in [0usize, 1, 5, 20, NAMESPACES - 1, NAMESPACES]
        .iter()
        .enumerate()
    {
        let watch = common::netns_watch::NetnsWatch::start();
        let mut child = common::kpct_command(&["lab", "up", file.to_str().unwrap()])
            .args(["--proxier", "kube-proxy-iptables"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        if count > 0 {
            watch.until_made(prefix.as_str(), count, &mut child);
        }
        let signal = [
            nix::sys::signal::Signal::SIGINT,
            nix::sys::signal::Signal::SIGTERM,
        ][i % 2];
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal);
        let status = child.wait().unwrap();
        let left = kpct::operations::lab::existing(&name).unwrap();
        match count {
            // Before the first namespace the handler may not be installed yet; after the last
            // one the lab may be complete (below).
            0 | NAMESPACES => {}
            _ => assert_eq!(
                status.code(),
                Some(130),
                "{signal} after {count} namespaces did not reach the handler ({status})"
            ),
        }
        if status.success() {
            // With every namespace made, the lab may be complete before the signal (the
            // proxier's programming is what is left): a complete lab, taken down for the next
            // round.
            assert_eq!(count, NAMESPACES, "{status}");
            assert_eq!(left.len(), NAMESPACES, "{left:?}");
            kpct::operations::lab::down(&name).unwrap();
        } else {
            assert_eq!(
                left,
                Vec::<String>::new(),
                "{signal} after {count} namespaces ({status})"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `lab up --backends` serves the scenario's echo backends until it is stopped: a connection to
/// the pod, and to the Service through the proxier's rules, is answered by the pod; after
/// Ctrl-C the lab stays up, without them.
#[test]
fn lab_up_with_backends_serves_until_stopped() {
    use std::io::BufRead;
    let name = format!("labserve-{}", std::process::id());
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/hairpin-nodeport.yaml"
    ))
    .unwrap();
    let (dir, file) = scenario_file(
        &name,
        &text.replace("name: hairpin-nodeport", &format!("name: {name}")),
    );
    let _guard = DownOnDrop(name.clone());
    let mut child = common::kpct_command(&["lab", "up", file.to_str().unwrap()])
        .args(["--proxier", "kube-proxy-iptables", "--backends"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines.send(line);
        }
    });
    let mut printed = Vec::new();
    while !printed
        .iter()
        .any(|l: &String| l.contains("backends are serving"))
    {
        let line = seen
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("lab up --backends printed only {printed:#?}"));
        printed.push(line);
    }
    let node = kpct::operations::lab::existing(&name)
        .unwrap()
        .into_iter()
        .find(|n| n.ends_with(".node-node-a"))
        .expect("node-a's namespace");
    let connect = |ip: &str, port: u16| {
        let script = format!(
            "import socket; s=socket.create_connection(('{ip}',{port}),3); print(s.recv(200).decode())"
        );
        Command::new("ip")
            .args(["netns", "exec", &node, "python3", "-c", &script])
            .output()
            .unwrap()
    };
    let web = kpct::load(&file).unwrap();
    let pod = &web.topology.pods[0];
    let port = pod.ports[0].container_port;
    let direct = connect(&pod.ip.to_string(), port);
    assert!(
        String::from_utf8_lossy(&direct.stdout).contains(&format!("pod={}", pod.name)),
        "{direct:?}"
    );
    let sp = &kpct::scenario::cluster_state(&web).service_ports[0];
    let via_service = connect(&sp.cluster_ip.unwrap().to_string(), sp.port);
    assert!(
        String::from_utf8_lossy(&via_service.stdout).contains("pod="),
        "{via_service:?}"
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    );
    let mut said = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut said).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(130));
    assert!(
        !kpct::operations::lab::existing(&name).unwrap().is_empty(),
        "the lab stays up"
    );
    // It says so: it removed none of the lab's namespaces, and does not claim it did.
    assert!(
        said.contains("kpct: interrupted; no network namespace of this run was left to remove"),
        "{said}"
    );
    assert!(
        !connect(&pod.ip.to_string(), port).status.success(),
        "nothing serves any more"
    );
    kpct::operations::lab::down(&name).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `lab up --step N` leaves the lab as the scenario stands after step N: here the Service is
/// deleted in step 1, so its chains are gone from the node and the pod deleted with it is gone
/// from the lab.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lab_up_at_a_step_holds_the_state_after_it() {
    let name = format!("labtest-{}-step", std::process::id());
    let mut s = scenario(&name);
    s.steps = vec![kpct::scenario::Step {
        delete: kpct::scenario::Deletions {
            services: vec!["web".into()],
            pods: vec!["web-1".into()],
            ..Default::default()
        },
        ..Default::default()
    }];
    kpct::scenario::validate(&s).expect("the stepped scenario is valid");
    let _guard = DownOnDrop(name.clone());
    let proxier = builtin("kube-proxy-iptables").unwrap();
    let Err(too_far) = kpct::operations::lab::up_with(
        &s,
        proxier.as_ref(),
        kpct::operations::lab::Serving::Nothing,
        Some(2),
    )
    .await
    else {
        panic!("a lab at step 2 of a scenario with one step came up");
    };
    assert!(
        too_far.to_string().contains("has no step 2 (it has 1"),
        "{too_far:#}"
    );
    let (lab, _) = kpct::operations::lab::up_with(
        &s,
        proxier.as_ref(),
        kpct::operations::lab::Serving::Nothing,
        Some(1),
    )
    .await
    .unwrap();
    assert_eq!(
        kpct::operations::lab::existing(&name).unwrap().len(),
        2,
        "fabric and node are up, the deleted pod is not"
    );
    let nat = in_node(&lab, &["iptables-save", "-t", "nat"]);
    assert!(nat.contains(":KUBE-SERVICES"), "{nat}");
    assert!(
        !nat.contains("KUBE-SVC-"),
        "the deleted Service's chains are gone:\n{nat}"
    );
    kpct::operations::lab::down(&name).unwrap();
}

/// An IPv6-only lab's commands look at the `ip6` table, ip6tables and the KUBE-6- sets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_only_labs_answer_troubleshooting_commands() {
    let lab = kpct::operations::lab::troubleshooting(
        kpct::operations::lab::Dataplane::Nftables,
        &[kpct::scenario::IpFamily::Ipv6],
    );
    assert!(lab.iter().all(|c| !c.contains(" ip kube-proxy")), "{lab:?}");
    up_check_down_of(
        scenario6,
        "v6-",
        "kube-proxy-nftables",
        &[(
            &["nft", "list", "map", "ip6", "kube-proxy", "service-ips"],
            "fd00:10:96::2d . tcp . 80 : goto service-",
        )],
    )
    .await;
    up_check_down_of(
        scenario6,
        "v6-",
        "kube-proxy-iptables",
        &[(
            &["ip6tables", "-t", "nat", "-L", "KUBE-SERVICES", "-n", "-v"],
            "fd00:10:96::2d",
        )],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_an_ipv6_only_ipvs_lab_answers_troubleshooting_commands() {
    require_ipvs();
    up_check_down_of(
        scenario6,
        "v6-",
        "kube-proxy-ipvs",
        &[
            (&["ipvsadm", "-Ln"], "TCP  [fd00:10:96::2d]:80 rr"),
            (&["ip", "addr", "show", "kube-ipvs0"], "fd00:10:96::2d/128"),
            (
                &["ipset", "list", "KUBE-6-CLUSTER-IP"],
                "fd00:10:96::2d,tcp:80",
            ),
        ],
    )
    .await;
}

/// A lab takes any proxier kind: here an `exec:` proxier, whose printed programming the node
/// then holds (its own chain), named in the lab as given.
#[tokio::test]
async fn a_lab_is_programmed_by_an_exec_proxier() {
    let name = format!("labtest-{}-exec", std::process::id());
    let s = scenario(&name);
    let _guard = DownOnDrop(name.clone());
    let spec = format!(
        "exec:python3 {}/tests/fixtures/exec/minimal_proxier.py print",
        env!("CARGO_MANIFEST_DIR")
    );
    let proxier = kpct::ProxierSpec::parse_as::<kpct::drivers::ExecProxier>(&spec).unwrap();
    let lab = kpct::operations::lab::up(&s, &proxier).await.unwrap();
    assert_eq!(lab.proxier, spec);
    let nat = in_node(&lab, &["iptables-save", "-t", "nat"]);
    assert!(nat.contains(":KPCT-SERVICES"), "{nat}");
    kpct::operations::lab::down(&name).unwrap();
}
