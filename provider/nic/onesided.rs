//! One-sided operations (RMA, atomics) carried as messages between
//! endpoints, the same way over both wires.
//!
//! An initiator's operation becomes, per remote iov (a *part*), a request
//! message to the target's endpoint; the target checks the access against
//! its memory registrations, touches its memory only if allowed, and
//! answers every request with a response message named by the part's id
//! (`MsgHdr::tag`): the status, and for a read or a fetching atomic the
//! data. The initiator's part ends on that response, so a completed write
//! is in the target's memory (FI_DELIVERY_COMPLETE).
//!
//! ```text
//!   WRITE      head + data            writes that fit one eager message of
//!                                     the peer's wire (shm: a slot, udp:
//!                                     the rendezvous threshold)
//!   WRITE_HEAD head, then BODY data   larger writes: the data is a message
//!                                     of its own, which the wire moves by
//!                                     rendezvous straight into the target's
//!                                     memory (shm: one process_vm_readv)
//!   READ       head                   the response carries the data (by
//!                                     rendezvous when large: the initiator
//!                                     pulls it straight from the target)
//!   ATOMIC     head + operands [+ compare values]; the response carries
//!              the values before the operation for fetching forms
//!   RESP       tag: part id, data: status (0 or a positive libfabric error)
//!   WRITE      a large write without remote CQ data, as one rendezvous
//!              message: tag: key, data: remote address, the data itself
//!              pulled straight into the target's memory; no response:
//!              the wire's end of the rendezvous answers (on a wire that
//!              `refuses`, shm, whose FIN carries the target's status)
//! ```
//!
//! Every request message starts with a `Head` (32 bytes; `emit` and
//! `parse` are its only encoder and decoder). `MsgHdr::flags` tells the
//! three kinds of message apart from two-sided ones (`REQ`, `BODY`,
//! `RESP`); a one-sided message never reaches the tag matching.
//!
//! Messages to one peer keep their order on either wire, so a BODY
//! belongs to the WRITE_HEAD before it; it also carries the part id, and
//! the target checks it.
#![forbid(unsafe_code)]

pub(crate) use crate::nic::atomic::AtomicClass;

/// `MsgHdr::flags` of a request (a `Head` leads its payload).
pub(crate) const REQ: u32 = 1 << 2;
/// `MsgHdr::flags` of a large write's data (follows its WRITE_HEAD).
pub(crate) const BODY: u32 = 1 << 3;
/// `MsgHdr::flags` of a response.
pub(crate) const RESP: u32 = 1 << 4;
/// `MsgHdr::flags` of a direct write: a large write as one rendezvous
/// message, no head (`MsgHdr::tag` is the key, `MsgHdr::data` the remote
/// address), answered by its wire's FIN.
pub(crate) const WRITE: u32 = 1 << 5;
/// Any one-sided message.
pub(crate) const ONESIDED: u32 = REQ | BODY | RESP | WRITE;

/// The largest request a target stages when a wire brings it by
/// rendezvous (the shm wire may, short of credit): a head and a write as
/// large as the largest shm eager size (FI_GNIX_SHM_EAGER), or an
/// atomic's operands and compare values.
pub(crate) const MAX_REQUEST: usize = HEAD_LEN + 65536;

/// What a request asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReqKind {
    Write = 1,
    WriteHead = 2,
    Read = 3,
    Atomic = 4,
}

/// A request's head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub kind: ReqKind,
    /// Remote CQ data (in `MsgHdr::data`) goes with a write.
    pub has_data: bool,
    /// The initiator offers this request ordered (it is no larger than
    /// its endpoint's `max_order_*_size`): the target applies it only
    /// after every ordered request of that initiator before it.
    pub ordered: bool,
    pub class: AtomicClass,
    /// Atomics: libfabric's `enum fi_op` and `enum fi_datatype`, and how
    /// many elements.
    pub op: u8,
    pub datatype: u8,
    pub count: u32,
    pub key: u64,
    /// As the application gave it (a virtual address or an offset,
    /// as the target's registrations say).
    pub addr: u64,
    /// Bytes of the target's memory the request touches.
    pub len: u64,
}

pub(crate) const HEAD_LEN: usize = 32;

// Field offsets.
const KIND: usize = 0;
const FLAGS: usize = 1;
const OP: usize = 2;
const DATATYPE: usize = 3;
const COUNT: usize = 4;
const KEY: usize = 8;
const ADDR: usize = 16;
const LEN: usize = 24;

const F_DATA: u8 = 1;
const F_CLASS_SHIFT: u8 = 1;
const F_CLASS_MASK: u8 = 3 << F_CLASS_SHIFT;
const F_ORDERED: u8 = 1 << 3;

impl Head {
    pub(crate) fn emit(&self) -> [u8; HEAD_LEN] {
        let mut b = [0u8; HEAD_LEN];
        b[KIND] = self.kind as u8;
        let class: u8 = match self.class {
            AtomicClass::Plain => 0,
            AtomicClass::Fetch => 1,
            AtomicClass::Compare => 2,
        };
        b[FLAGS] = (u8::from(self.has_data) * F_DATA) | (class << F_CLASS_SHIFT) | (u8::from(self.ordered) * F_ORDERED);
        b[OP] = self.op;
        b[DATATYPE] = self.datatype;
        b[COUNT..COUNT + 4].copy_from_slice(&self.count.to_le_bytes());
        b[KEY..KEY + 8].copy_from_slice(&self.key.to_le_bytes());
        b[ADDR..ADDR + 8].copy_from_slice(&self.addr.to_le_bytes());
        b[LEN..LEN + 8].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// The head at the start of `b`; None if `b` is too short or names an
    /// unknown kind (a malformed request: dropped and counted).
    pub(crate) fn parse(b: &[u8]) -> Option<Head> {
        let b: &[u8; HEAD_LEN] = b.get(..HEAD_LEN)?.try_into().ok()?;
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let kind = match b[KIND] {
            1 => ReqKind::Write,
            2 => ReqKind::WriteHead,
            3 => ReqKind::Read,
            4 => ReqKind::Atomic,
            _ => return None,
        };
        if b[FLAGS] & !(F_DATA | F_CLASS_MASK | F_ORDERED) != 0 {
            return None;
        }
        let class = match (b[FLAGS] & F_CLASS_MASK) >> F_CLASS_SHIFT {
            0 => AtomicClass::Plain,
            1 => AtomicClass::Fetch,
            2 => AtomicClass::Compare,
            _ => return None,
        };
        Some(Head {
            kind,
            has_data: b[FLAGS] & F_DATA != 0,
            ordered: b[FLAGS] & F_ORDERED != 0,
            class,
            op: b[OP],
            datatype: b[DATATYPE],
            count: u32::from_le_bytes(b[COUNT..COUNT + 4].try_into().expect("4 bytes")),
            key: u64_at(KEY),
            addr: u64_at(ADDR),
            len: u64_at(LEN),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_parses_as_emitted_and_junk_is_refused() {
        let h = Head {
            kind: ReqKind::Atomic,
            has_data: true,
            ordered: true,
            class: AtomicClass::Compare,
            op: 17,
            datatype: 9,
            count: 3,
            key: 0xC0DE,
            addr: u64::MAX - 7,
            len: 24,
        };
        let b = h.emit();
        assert_eq!(Head::parse(&b), Some(h));
        for n in 0..HEAD_LEN {
            assert_eq!(Head::parse(&b[..n]), None, "a {n}-byte prefix");
        }
        let mut bad = b;
        bad[KIND] = 0;
        assert_eq!(Head::parse(&bad), None);
        bad = b;
        bad[FLAGS] = 3 << F_CLASS_SHIFT;
        assert_eq!(Head::parse(&bad), None);
        bad[FLAGS] = 1 << 4;
        assert_eq!(Head::parse(&bad), None);
        let plain = Head {
            ordered: false,
            class: AtomicClass::Plain,
            ..h
        };
        assert_eq!(Head::parse(&plain.emit()), Some(plain));
    }
}
