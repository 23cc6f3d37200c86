//! What the executor's tests build their plans, requests and replies from.

use crate::reply::Reply;
use crate::request::GetCmd;
use crate::request::ReqSpec;
use crate::{Plan, Send};

/// A plan that sends to server `index` of `pool`.
pub fn to(pool: usize, index: usize) -> Plan {
    Plan::Send(Send {
        pool,
        index,
        keep_prefix: false,
        exptime: Vec::new(),
        asynclog: None,
    })
}

pub fn get(key: &str) -> ReqSpec {
    ReqSpec::Get {
        cmd: GetCmd::Get,
        key: key.as_bytes().to_vec(),
    }
}

/// A server's reply.
pub fn r(bytes: &[u8]) -> Reply {
    Reply::from_server(bytes)
}
