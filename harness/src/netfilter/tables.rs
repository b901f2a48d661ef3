//! The nf_tables tables of a namespace: their names (what `nft list tables` prints), and
//! whether any iptables-nft table is there (what an empty `iptables-save` would say). A tool
//! run costs ~0.2 s in the emulated VM; these cost a netlink round trip.

use super::socket::{carried, dump, message, Message};
use crate::netns::Netns;
use anyhow::Result;
use netlink_packet_core::{NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_netfilter::nftables::{NfTablesMessage, TableAttribute, TableMessage};
use netlink_packet_netfilter::{NetfilterMessageInner, NetfilterProtoFamily};

/// The tables a dump of `family` returns: (NFPROTO_* family, name) each.
fn tables_of(ns: &Netns, family: NetfilterProtoFamily) -> Result<Vec<(u8, String)>> {
    let request = message(
        family,
        0,
        NfTablesMessage::GetTable(TableMessage {
            attributes: Vec::new(),
        }),
        NLM_F_REQUEST | NLM_F_DUMP,
        1,
    );
    Ok(dump(ns, &request)?.iter().filter_map(table).collect())
}

/// The (family, name) of a NEWTABLE reply.
pub(crate) fn table(message: &Message) -> Option<(u8, String)> {
    let Some((family, NetfilterMessageInner::NfTables(NfTablesMessage::NewTable(t)))) =
        carried(message)
    else {
        return None;
    };
    t.attributes.iter().find_map(|a| match a {
        TableAttribute::Name(name) => Some((family, name.clone())),
        _ => None,
    })
}

/// Every nf_tables table of `ns`, of any family: (NFPROTO_* family, name), as `nft list
/// tables` would name them.
pub fn nft_tables(ns: &Netns) -> Result<Vec<(u8, String)>> {
    tables_of(ns, NetfilterProtoFamily::Unspec)
}

/// Whether `ns` holds no nf_tables table of family `ip` (where iptables-nft's tables live), so
/// that `iptables-save` (nft) would print nothing. `None` when the kernel could not say (then
/// ask the tool).
pub fn holds_no_ip_tables(ns: &Netns) -> Option<bool> {
    tables_of(ns, NetfilterProtoFamily::IPv4)
        .ok()
        .map(|tables| tables.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netfilter::socket::{decode, encode};

    #[test]
    fn a_table_reply_gives_its_family_and_name() {
        let reply = message(
            NetfilterProtoFamily::Inet,
            0,
            NfTablesMessage::NewTable(TableMessage {
                attributes: vec![
                    TableAttribute::Name("kube-proxy".into()),
                    TableAttribute::Use(3),
                ],
            }),
            0,
            1,
        );
        let decoded = decode(&encode(&[reply]));
        assert_eq!(
            table(decoded[0].as_ref().unwrap()),
            Some((1, "kube-proxy".to_string()))
        );
    }
}
