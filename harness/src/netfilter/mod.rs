//! Every conversation kpct has with netfilter over nfnetlink, typed by the rust-netlink
//! family's `netlink-packet-netfilter` (as links and routes are by `netlink-packet-route`):
//! the conntrack table, nf_tables tables, the drop-verdict table and its trace events, and the
//! one ipset question. A tool run costs ~0.2 s in the emulated VM; each of these a netlink
//! round trip.

pub mod conntrack;
mod guard;
pub mod ipset;
pub(crate) mod socket;
pub mod tables;
pub(crate) mod trace_event;
pub mod verdict_table;

/// Everything kpct reads of a buffer of nfnetlink replies, each message as its reader takes it
/// (the fuzz surface `netfilter_netlink`); returns how many messages decoded.
pub(crate) fn read_replies(data: &[u8]) -> usize {
    use netlink_packet_netfilter::nftables::NfTablesMessage;
    use netlink_packet_netfilter::NetfilterMessageInner;
    let mut decoded = 0;
    for message in socket::decode(data).into_iter().flatten() {
        decoded += 1;
        let _ = socket::errno(&message);
        let _ = conntrack::entry(&message);
        let _ = tables::table(&message);
        match socket::carried(&message) {
            Some((family, NetfilterMessageInner::NfTables(NfTablesMessage::Trace(a)))) => {
                let _ = trace_event::parse(family, a);
            }
            Some((_, NetfilterMessageInner::NfTables(NfTablesMessage::NewRule(rule)))) => {
                let _ = verdict_table::is_plain_drop(rule);
            }
            _ => {}
        }
    }
    decoded
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes the fuzz target `netfilter_netlink`'s seeds (`ci/fuzz.sh --seed`): replies as
    /// the kernel sends them to each reader, built with the crate's own types.
    #[test]
    #[ignore = "writes fuzz seeds: ci/fuzz.sh --seed"]
    fn write_fuzz_seeds() {
        let Ok(dir) = std::env::var("KPCT_FUZZ_SEEDS") else {
            panic!("KPCT_FUZZ_SEEDS names the directory to write into");
        };
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in seeds::all() {
            std::fs::write(std::path::Path::new(&dir).join(name), bytes).unwrap();
        }
    }

    #[test]
    fn every_seed_reads_whole() {
        for (name, bytes) in seeds::all() {
            let messages = socket::decode(&bytes);
            assert!(messages.iter().all(Result::is_ok), "{name}: {messages:?}");
            assert_eq!(read_replies(&bytes), messages.len(), "{name}");
        }
    }
}

#[cfg(test)]
mod seeds;
