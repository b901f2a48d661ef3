//! Which replies kpct hands `netlink-packet-netfilter` to decode. Only the kinds kpct reads
//! (anything else is passed over unread), and never a rule with a data attribute whose inner
//! attribute claims more bytes than it has: the crate reads those through an unchecked
//! `NlaBuffer` (`cmp`, `immediate` and `bitwise` data in 0.4.0) and panics on them. The kernel
//! never sends such a rule; fuzzing the replies (`netfilter_netlink`) found it.

use netlink_packet_core::{NlaBuffer, NlasIterator};

const NLA_HEADER: usize = 4;
/// `struct nfgenmsg` precedes every nfnetlink message's attributes.
const NFGENMSG: usize = 4;

/// `(subsystem << 8) | type` of the messages kpct reads: ctnetlink's entries
/// (IPCTNL_MSG_CT_NEW), nf_tables' tables, rules and trace events (NFT_MSG_NEWTABLE,
/// NFT_MSG_NEWRULE, NFT_MSG_TRACE), ipset's sets (IPSET_CMD_LIST); NLMSG_ERROR and NLMSG_DONE
/// are netlink's own.
const READ: [u16; 7] = [0x2, 0x3, 0x0100, 0x0a00, 0x0a06, 0x0a11, 0x0607];
const NFT_MSG_NEWRULE: u16 = 0x0a06;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;

/// Whether kpct reads messages of this netlink type at all.
pub(super) fn read(kind: u16) -> bool {
    READ.contains(&kind)
}

/// Why the crate must not be handed this message (of netlink type `kind`, `payload` after the
/// netlink header), if it must not.
pub(super) fn refusal(kind: u16, payload: &[u8]) -> Option<String> {
    if kind != NFT_MSG_NEWRULE {
        return None;
    }
    let body = payload.get(NFGENMSG..)?;
    for (k, expressions) in attributes(body) {
        if k != NFTA_RULE_EXPRESSIONS {
            continue;
        }
        for (_, expression) in attributes(expressions) {
            // As the crate reads an expression: a data attribute is read by the name of the
            // attribute just before it, if that was the name (one trailing NUL dropped).
            let mut name: Option<&[u8]> = None;
            for (k, value) in attributes(expression) {
                let named = name.take();
                if k == NFTA_EXPR_NAME {
                    name = Some(value.strip_suffix(&[0]).unwrap_or(value));
                    continue;
                }
                if k != NFTA_EXPR_DATA {
                    continue;
                }
                // NFTA_CMP_DATA; NFTA_IMMEDIATE_DATA; NFTA_BITWISE_MASK, _XOR, _DATA.
                let holding_data: &[u16] = match named {
                    Some(b"cmp") => &[3],
                    Some(b"immediate") => &[2],
                    Some(b"bitwise") => &[4, 5, 7],
                    _ => continue,
                };
                for (k, value) in attributes(value) {
                    if holding_data.contains(&k) && !one_whole_attribute(value) {
                        return Some(format!(
                            "a rule whose {} data attribute {k} is cut short",
                            String::from_utf8_lossy(named.unwrap_or_default())
                        ));
                    }
                }
            }
        }
    }
    None
}

/// Whether `value` starts with an attribute whose length fits it: what the crate reads through
/// an unchecked `NlaBuffer` there, checked as its own checked reads are.
fn one_whole_attribute(value: &[u8]) -> bool {
    NlaBuffer::new_checked(value).is_ok()
}

/// `(type, value)` of each whole attribute of `buf`, in order, walked as the crate walks it
/// (`NlasIterator`): it stops at the first that is not whole.
fn attributes(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    NlasIterator::new(buf).map_while(Result::ok).map(|nla| {
        let (kind, len) = (nla.kind(), usize::from(nla.length()));
        (kind, &nla.into_inner()[NLA_HEADER..len])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attribute(kind: u16, value: &[u8]) -> Vec<u8> {
        let len = NLA_HEADER + value.len();
        let mut a = (len as u16).to_ne_bytes().to_vec();
        a.extend(kind.to_ne_bytes());
        a.extend(value);
        a.resize((len + 3) & !3, 0);
        a
    }

    /// A NEWRULE payload with one expression of `fields`.
    fn rule(fields: &[Vec<u8>]) -> Vec<u8> {
        let element = attribute(1, &fields.concat());
        let mut payload = vec![2, 0, 0, 0];
        payload.extend(attribute(NFTA_RULE_EXPRESSIONS, &element));
        payload
    }

    #[test]
    fn a_rule_whose_data_claims_more_than_it_has_is_refused() {
        let name = attribute(NFTA_EXPR_NAME, b"immediate\0");
        // NFTA_IMMEDIATE_DATA holding an attribute that claims 200 bytes.
        let cut = attribute(NFTA_EXPR_DATA, &attribute(2, &[200, 0, 2, 0, 0, 0, 0, 0]));
        assert!(refusal(NFT_MSG_NEWRULE, &rule(&[name.clone(), cut.clone()])).is_some());
        // The crate reads data by the name just before it: with another attribute between,
        // it reads raw attributes and cannot panic.
        let other = attribute(9, &[0; 4]);
        assert_eq!(
            refusal(NFT_MSG_NEWRULE, &rule(&[name.clone(), other, cut])),
            None
        );
        let whole = attribute(NFTA_EXPR_DATA, &attribute(2, &attribute(1, &[0; 4])));
        assert_eq!(refusal(NFT_MSG_NEWRULE, &rule(&[name, whole])), None);
        assert!(!read(0x0a09), "sets are not read");
    }
}
