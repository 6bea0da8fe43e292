//! VC handshake (DESIGN.md §3, gnix VC over the CmNic channel).
//!
//! Each VC incarnation draws a random nonzero nonce (its connection id) and
//! an initial sequence number. CONN_REQ carries the requester's; CONN_RESP
//! carries the responder's and echoes the requester's. Every later datagram
//! carries the *receiver's* nonce, so datagrams of an old incarnation (either
//! side restarted at the same address) or forged ones are recognised and
//! dropped.
//!
//! Simultaneous connect needs no tie-break: a side that is still connecting
//! when the peer's CONN_REQ arrives adopts the peer's nonce and ISN and
//! answers with its own (the same ones its CONN_REQ carried). Both sides end
//! with the same pair of nonces whatever order the four datagrams arrive in,
//! and nothing queued on either side is thrown away.

/// What an incoming CONN_REQ means for the VC we hold with that address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReqVerdict {
    /// No VC: accept and answer.
    Fresh,
    /// Same nonce as the VC's peer: our CONN_RESP was lost, answer again.
    Duplicate,
    /// We are connecting too: adopt the peer's nonce and answer.
    Simultaneous,
    /// A different nonce on an established VC: the peer restarted, or the
    /// request is forged. The engine challenges the old VC first (see
    /// `engine::Challenge`); if it stays silent, fail its operations, then
    /// accept.
    Restarted,
}

pub fn classify_req(existing: Option<Option<u64>>, nonce: u64) -> ReqVerdict {
    match existing {
        None => ReqVerdict::Fresh,
        Some(None) => ReqVerdict::Simultaneous,
        Some(Some(n)) if n == nonce => ReqVerdict::Duplicate,
        Some(Some(_)) => ReqVerdict::Restarted,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handshake {
    Connecting {
        since: u64,
        /// When the next CONN_REQ is due.
        next_req_at: u64,
        attempts: u32,
        /// A CONN_REQ should go out at the next transmit opportunity.
        req_due: bool,
    },
    Established,
}

/// Retransmission interval of CONN_REQ: the RTO is unknown before the first
/// exchange, so back off from the configured initial value.
pub fn req_interval(rto_init: u64, rto_max: u64, attempts: u32) -> u64 {
    rto_init.saturating_mul(1u64 << attempts.min(20)).min(rto_max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        assert_eq!(classify_req(None, 5), ReqVerdict::Fresh);
        assert_eq!(classify_req(Some(None), 5), ReqVerdict::Simultaneous);
        assert_eq!(classify_req(Some(Some(5)), 5), ReqVerdict::Duplicate);
        assert_eq!(classify_req(Some(Some(6)), 5), ReqVerdict::Restarted);
        assert_eq!(req_interval(10, 1000, 0), 10);
        assert_eq!(req_interval(10, 1000, 3), 80);
        assert_eq!(req_interval(10, 1000, 40), 1000);
    }
}
