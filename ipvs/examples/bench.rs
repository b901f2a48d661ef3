//! Creates 1,000 services x 10 destinations through this crate and through `ipvsadm -R`, each in
//! a fresh network namespace, and prints the times (not asserted).
//!
//! Needs root and a kernel with IP_VS: `cargo run --release -p ipvs-genl --example bench`.

use std::error::Error;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ipvs_genl::{
    apply, format_save, Destination, DestinationState, ForwardMethod, IpvsHandle, Protocol,
    Service, ServiceKey, ServiceState, Stats,
};

const SERVICES: u32 = 1000;
const DESTS_PER_SERVICE: u32 = 10;

type BoxResult<T> = Result<T, Box<dyn Error>>;

struct Netns(String);

impl Netns {
    fn new(tag: &str) -> BoxResult<Netns> {
        let name = format!("ipvsgenl-bench-{}-{tag}", std::process::id());
        check(
            Command::new("ip").args(["netns", "add", &name]).status()?,
            "ip netns add",
        )?;
        let ns = Netns(name);
        // Real-server adds fail with EINVAL until the namespace has a local routing table.
        check(
            ns.cmd(&["ip", "link", "set", "lo", "up"]).status()?,
            "ip link set lo up",
        )?;
        Ok(ns)
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0]).args(args);
        c
    }

    fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.0))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn check(status: std::process::ExitStatus, what: &str) -> BoxResult<()> {
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed: {status}").into())
    }
}

fn table() -> Vec<(Service, Vec<Destination>)> {
    (0..SERVICES)
        .map(|i| {
            let vip = Ipv4Addr::from(0x0a00_0000 | (i + 1));
            let svc = Service::new(
                ServiceKey::Addr {
                    protocol: Protocol::Tcp,
                    addr: IpAddr::V4(vip),
                    port: 80,
                },
                "rr",
            );
            let dests = (0..DESTS_PER_SERVICE)
                .map(|j| Destination {
                    forward: ForwardMethod::Masq,
                    ..Destination::new(
                        IpAddr::V4(Ipv4Addr::from(
                            0xac10_0000 | (i * DESTS_PER_SERVICE + j + 1),
                        )),
                        8080,
                    )
                })
                .collect();
            (svc, dests)
        })
        .collect()
}

fn save_text(table: &[(Service, Vec<Destination>)]) -> String {
    let states: Vec<(ServiceState, Vec<DestinationState>)> = table
        .iter()
        .map(|(s, d)| {
            (
                ServiceState {
                    service: s.clone(),
                    stats: Stats::default(),
                },
                d.iter()
                    .map(|d| DestinationState {
                        destination: d.clone(),
                        active_conns: 0,
                        inactive_conns: 0,
                        persistent_conns: 0,
                        stats: Stats::default(),
                    })
                    .collect(),
            )
        })
        .collect();
    format_save(&states)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn main() -> BoxResult<()> {
    check(
        Command::new("modprobe").arg("ip_vs").status()?,
        "modprobe ip_vs",
    )?;
    let table = table();
    let text = save_text(&table);
    let total_dests = SERVICES * DESTS_PER_SERVICE;
    println!("table: {SERVICES} services x {DESTS_PER_SERVICE} destinations");

    let ours_ns = Netns::new("ours")?;
    let mut h = IpvsHandle::in_netns(&ours_ns.path())?;
    let start = Instant::now();
    apply(&mut h, &table)?;
    let ours_create = start.elapsed();

    let start = Instant::now();
    let dumped = h.table()?;
    let ours_text = format_save(&dumped);
    let ours_dump = start.elapsed();

    let theirs_ns = Netns::new("ipvsadm")?;
    let start = Instant::now();
    let mut child = theirs_ns
        .cmd(&["ipvsadm", "-R"])
        .stdin(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or("no stdin for ipvsadm")?
        .write_all(text.as_bytes())?;
    check(child.wait()?, "ipvsadm -R")?;
    let theirs_create = start.elapsed();

    let start = Instant::now();
    let out = theirs_ns.cmd(&["ipvsadm", "-Sn"]).output()?;
    let theirs_dump = start.elapsed();
    let theirs_text = String::from_utf8(out.stdout)?;

    let dests_ours: usize = dumped.iter().map(|(_, d)| d.len()).sum();
    println!(
        "created: ours {} services / {dests_ours} destinations; identical save output: {}",
        dumped.len(),
        ours_text == theirs_text
    );
    println!(
        "create  ipvs-genl apply:   {:>12}  ({:.1} us per request)",
        ms(ours_create),
        ours_create.as_secs_f64() * 1e6 / f64::from(SERVICES + total_dests)
    );
    println!(
        "create  ipvsadm -R:        {:>12}  ({:.1} us per line)",
        ms(theirs_create),
        theirs_create.as_secs_f64() * 1e6 / f64::from(SERVICES + total_dests)
    );
    println!(
        "speedup: {:.1}x",
        theirs_create.as_secs_f64() / ours_create.as_secs_f64()
    );
    println!("dump    ipvs-genl + format_save: {:>12}", ms(ours_dump));
    println!("dump    ipvsadm -Sn:             {:>12}", ms(theirs_dump));
    Ok(())
}
