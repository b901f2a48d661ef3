//! The IPVS generic netlink message: a command plus first-level attributes.

use netlink_packet_core::{DecodeError, Emitable, ParseableParametrized};
use netlink_packet_generic::{GenlFamily, GenlHeader};

use super::attrs::{parse_cmd_attrs, CmdAttr};
use super::constants::*;

/// `IPVS_CMD_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpvsCmd {
    NewService,
    SetService,
    DelService,
    GetService,
    NewDest,
    SetDest,
    DelDest,
    GetDest,
    NewDaemon,
    DelDaemon,
    GetDaemon,
    SetConfig,
    GetConfig,
    SetInfo,
    GetInfo,
    Zero,
    Flush,
    Other(u8),
}

impl From<IpvsCmd> for u8 {
    fn from(cmd: IpvsCmd) -> u8 {
        match cmd {
            IpvsCmd::NewService => IPVS_CMD_NEW_SERVICE,
            IpvsCmd::SetService => IPVS_CMD_SET_SERVICE,
            IpvsCmd::DelService => IPVS_CMD_DEL_SERVICE,
            IpvsCmd::GetService => IPVS_CMD_GET_SERVICE,
            IpvsCmd::NewDest => IPVS_CMD_NEW_DEST,
            IpvsCmd::SetDest => IPVS_CMD_SET_DEST,
            IpvsCmd::DelDest => IPVS_CMD_DEL_DEST,
            IpvsCmd::GetDest => IPVS_CMD_GET_DEST,
            IpvsCmd::NewDaemon => IPVS_CMD_NEW_DAEMON,
            IpvsCmd::DelDaemon => IPVS_CMD_DEL_DAEMON,
            IpvsCmd::GetDaemon => IPVS_CMD_GET_DAEMON,
            IpvsCmd::SetConfig => IPVS_CMD_SET_CONFIG,
            IpvsCmd::GetConfig => IPVS_CMD_GET_CONFIG,
            IpvsCmd::SetInfo => IPVS_CMD_SET_INFO,
            IpvsCmd::GetInfo => IPVS_CMD_GET_INFO,
            IpvsCmd::Zero => IPVS_CMD_ZERO,
            IpvsCmd::Flush => IPVS_CMD_FLUSH,
            IpvsCmd::Other(n) => n,
        }
    }
}

impl From<u8> for IpvsCmd {
    fn from(n: u8) -> Self {
        match n {
            IPVS_CMD_NEW_SERVICE => IpvsCmd::NewService,
            IPVS_CMD_SET_SERVICE => IpvsCmd::SetService,
            IPVS_CMD_DEL_SERVICE => IpvsCmd::DelService,
            IPVS_CMD_GET_SERVICE => IpvsCmd::GetService,
            IPVS_CMD_NEW_DEST => IpvsCmd::NewDest,
            IPVS_CMD_SET_DEST => IpvsCmd::SetDest,
            IPVS_CMD_DEL_DEST => IpvsCmd::DelDest,
            IPVS_CMD_GET_DEST => IpvsCmd::GetDest,
            IPVS_CMD_NEW_DAEMON => IpvsCmd::NewDaemon,
            IPVS_CMD_DEL_DAEMON => IpvsCmd::DelDaemon,
            IPVS_CMD_GET_DAEMON => IpvsCmd::GetDaemon,
            IPVS_CMD_SET_CONFIG => IpvsCmd::SetConfig,
            IPVS_CMD_GET_CONFIG => IpvsCmd::GetConfig,
            IPVS_CMD_SET_INFO => IpvsCmd::SetInfo,
            IPVS_CMD_GET_INFO => IpvsCmd::GetInfo,
            IPVS_CMD_ZERO => IpvsCmd::Zero,
            IPVS_CMD_FLUSH => IpvsCmd::Flush,
            other => IpvsCmd::Other(other),
        }
    }
}

/// Payload of an IPVS generic netlink message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpvsMessage {
    pub cmd: IpvsCmd,
    pub attrs: Vec<CmdAttr>,
}

impl IpvsMessage {
    pub fn new(cmd: IpvsCmd, attrs: Vec<CmdAttr>) -> Self {
        IpvsMessage { cmd, attrs }
    }
}

impl GenlFamily for IpvsMessage {
    fn family_name() -> &'static str {
        IPVS_GENL_NAME
    }

    fn command(&self) -> u8 {
        self.cmd.into()
    }

    fn version(&self) -> u8 {
        IPVS_GENL_VERSION
    }
}

impl Emitable for IpvsMessage {
    fn buffer_len(&self) -> usize {
        self.attrs.as_slice().buffer_len()
    }

    fn emit(&self, buffer: &mut [u8]) {
        self.attrs.as_slice().emit(buffer)
    }
}

impl ParseableParametrized<[u8], GenlHeader> for IpvsMessage {
    fn parse_with_param(buf: &[u8], header: GenlHeader) -> Result<Self, DecodeError> {
        let cmd = IpvsCmd::from(header.cmd);
        Ok(IpvsMessage {
            cmd,
            attrs: parse_cmd_attrs(buf, cmd == IpvsCmd::SetInfo)?,
        })
    }
}
