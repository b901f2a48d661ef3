//! Numbers from include/uapi/linux/ip_vs.h (generic netlink part).
//!
//! Kept as plain constants so the attribute enums can match on them and the golden byte tests can
//! be checked against the header by eye.

pub const IPVS_GENL_NAME: &str = "IPVS";
pub const IPVS_GENL_VERSION: u8 = 1;

// Commands (enum IPVS_CMD_*).
pub const IPVS_CMD_NEW_SERVICE: u8 = 1;
pub const IPVS_CMD_SET_SERVICE: u8 = 2;
pub const IPVS_CMD_DEL_SERVICE: u8 = 3;
pub const IPVS_CMD_GET_SERVICE: u8 = 4;
pub const IPVS_CMD_NEW_DEST: u8 = 5;
pub const IPVS_CMD_SET_DEST: u8 = 6;
pub const IPVS_CMD_DEL_DEST: u8 = 7;
pub const IPVS_CMD_GET_DEST: u8 = 8;
pub const IPVS_CMD_NEW_DAEMON: u8 = 9;
pub const IPVS_CMD_DEL_DAEMON: u8 = 10;
pub const IPVS_CMD_GET_DAEMON: u8 = 11;
pub const IPVS_CMD_SET_CONFIG: u8 = 12;
pub const IPVS_CMD_GET_CONFIG: u8 = 13;
pub const IPVS_CMD_SET_INFO: u8 = 14;
pub const IPVS_CMD_GET_INFO: u8 = 15;
pub const IPVS_CMD_ZERO: u8 = 16;
pub const IPVS_CMD_FLUSH: u8 = 17;

// First-level attributes (IPVS_CMD_ATTR_*).
pub const IPVS_CMD_ATTR_SERVICE: u16 = 1;
pub const IPVS_CMD_ATTR_DEST: u16 = 2;
pub const IPVS_CMD_ATTR_DAEMON: u16 = 3;
pub const IPVS_CMD_ATTR_TIMEOUT_TCP: u16 = 4;
pub const IPVS_CMD_ATTR_TIMEOUT_TCP_FIN: u16 = 5;
pub const IPVS_CMD_ATTR_TIMEOUT_UDP: u16 = 6;

// Service attributes, nested in IPVS_CMD_ATTR_SERVICE.
pub const IPVS_SVC_ATTR_AF: u16 = 1;
pub const IPVS_SVC_ATTR_PROTOCOL: u16 = 2;
pub const IPVS_SVC_ATTR_ADDR: u16 = 3;
pub const IPVS_SVC_ATTR_PORT: u16 = 4;
pub const IPVS_SVC_ATTR_FWMARK: u16 = 5;
pub const IPVS_SVC_ATTR_SCHED_NAME: u16 = 6;
pub const IPVS_SVC_ATTR_FLAGS: u16 = 7;
pub const IPVS_SVC_ATTR_TIMEOUT: u16 = 8;
pub const IPVS_SVC_ATTR_NETMASK: u16 = 9;
pub const IPVS_SVC_ATTR_STATS: u16 = 10;
pub const IPVS_SVC_ATTR_PE_NAME: u16 = 11;
pub const IPVS_SVC_ATTR_STATS64: u16 = 12;

// Destination attributes, nested in IPVS_CMD_ATTR_DEST.
pub const IPVS_DEST_ATTR_ADDR: u16 = 1;
pub const IPVS_DEST_ATTR_PORT: u16 = 2;
pub const IPVS_DEST_ATTR_FWD_METHOD: u16 = 3;
pub const IPVS_DEST_ATTR_WEIGHT: u16 = 4;
pub const IPVS_DEST_ATTR_U_THRESH: u16 = 5;
pub const IPVS_DEST_ATTR_L_THRESH: u16 = 6;
pub const IPVS_DEST_ATTR_ACTIVE_CONNS: u16 = 7;
pub const IPVS_DEST_ATTR_INACT_CONNS: u16 = 8;
pub const IPVS_DEST_ATTR_PERSIST_CONNS: u16 = 9;
pub const IPVS_DEST_ATTR_STATS: u16 = 10;
pub const IPVS_DEST_ATTR_ADDR_FAMILY: u16 = 11;
pub const IPVS_DEST_ATTR_STATS64: u16 = 12;
pub const IPVS_DEST_ATTR_TUN_TYPE: u16 = 13;
pub const IPVS_DEST_ATTR_TUN_PORT: u16 = 14;
pub const IPVS_DEST_ATTR_TUN_FLAGS: u16 = 15;

// Statistics attributes, nested in *_ATTR_STATS and *_ATTR_STATS64.
pub const IPVS_STATS_ATTR_CONNS: u16 = 1;
pub const IPVS_STATS_ATTR_INPKTS: u16 = 2;
pub const IPVS_STATS_ATTR_OUTPKTS: u16 = 3;
pub const IPVS_STATS_ATTR_INBYTES: u16 = 4;
pub const IPVS_STATS_ATTR_OUTBYTES: u16 = 5;
pub const IPVS_STATS_ATTR_CPS: u16 = 6;
pub const IPVS_STATS_ATTR_INPPS: u16 = 7;
pub const IPVS_STATS_ATTR_OUTPPS: u16 = 8;
pub const IPVS_STATS_ATTR_INBPS: u16 = 9;
pub const IPVS_STATS_ATTR_OUTBPS: u16 = 10;
pub const IPVS_STATS_ATTR_PAD: u16 = 11;

// Reply attributes of IPVS_CMD_GET_INFO.
pub const IPVS_INFO_ATTR_VERSION: u16 = 1;
pub const IPVS_INFO_ATTR_CONN_TAB_SIZE: u16 = 2;

// Forwarding methods (IP_VS_CONN_F_*), as carried by IPVS_DEST_ATTR_FWD_METHOD.
pub const IP_VS_CONN_F_FWD_MASK: u32 = 0x0007;
pub const IP_VS_CONN_F_MASQ: u32 = 0x0000;
pub const IP_VS_CONN_F_LOCALNODE: u32 = 0x0001;
pub const IP_VS_CONN_F_TUNNEL: u32 = 0x0002;
pub const IP_VS_CONN_F_DROUTE: u32 = 0x0003;
pub const IP_VS_CONN_F_BYPASS: u32 = 0x0004;

// Tunnel types (IP_VS_CONN_F_TUNNEL_TYPE_*).
pub const IP_VS_CONN_F_TUNNEL_TYPE_IPIP: u8 = 0;
pub const IP_VS_CONN_F_TUNNEL_TYPE_GUE: u8 = 1;
pub const IP_VS_CONN_F_TUNNEL_TYPE_GRE: u8 = 2;

pub const AF_INET: u16 = libc::AF_INET as u16;
pub const AF_INET6: u16 = libc::AF_INET6 as u16;
