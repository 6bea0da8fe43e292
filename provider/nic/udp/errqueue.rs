//! What the kernel learns about our datagrams after they left: ICMP
//! errors, above all "port unreachable", which the peer's host sends for
//! a datagram that reached it when no socket holds the port any more
//! (the peer's process closed its endpoint or died). That is how the udp
//! wire learns of a dead peer in milliseconds instead of after its
//! timeout, which under manual progress is long (params.rs).
//!
//! With IP_RECVERR (IPV6_RECVERR) set, the kernel queues each ICMP error
//! on the socket's error queue with what the ICMP message quoted of our
//! datagram (ip(7)): `recvmsg(MSG_ERRQUEUE)` returns that quote as data,
//! the destination the datagram went to as the name, and a
//! `sock_extended_err` saying which error as a control message. The
//! quote is what makes the news checkable: it carries the connection id
//! we put on everything we send to the peer (wire/mod.rs), which an
//! off-path forger does not know, so the engine believes only a quote
//! that names the VC (engine/refused.rs); an ICMP message is otherwise
//! as easy to forge as a datagram.
//!
//! A queue that is not empty keeps the socket reporting EPOLLERR, which
//! would wake the progress thread and every sleeper over and over, and
//! the error also makes the next send or receive on the socket fail once
//! (the socket's pending error). So whoever gets an error from a call on
//! one of our sockets drains that socket's queue at once (`UdpSockets`).
//!
//! libc, not rustix: rustix has neither IP_RECVERR nor MSG_ERRQUEUE, nor
//! a reader for the extended-error control message.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Bytes of a quoted datagram kept: its header up to the connection id
/// and a little more (wire/mod.rs: `CONN` is bytes 4..12).
pub const QUOTE_LEN: usize = 20;
/// Most error records one drain reads: the work of one call stays
/// bounded. Records left behind set the socket's pending error again,
/// so the next call on it drains the rest.
const DRAIN_MAX: usize = 16;

/// ICMP "destination unreachable, port unreachable" (RFC 792) and its
/// ICMPv6 counterpart (RFC 4443).
const ICMP_DEST_UNREACH: u8 = 3;
const ICMP_PORT_UNREACH: u8 = 3;
const ICMP6_DST_UNREACH: u8 = 1;
const ICMP6_DST_UNREACH_NOPORT: u8 = 4;

/// One record of a socket's error queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelNews {
    /// A datagram we sent to `to` found no socket at its port: `quote`
    /// holds the first `len` bytes of it (the ICMP message's quote).
    Refused {
        to: SocketAddr,
        quote: [u8; QUOTE_LEN],
        len: usize,
    },
    /// Any other error (another ICMP error, such as host unreachable or
    /// a path MTU, or a local one): the reliability layer copes with it.
    Other,
}

impl KernelNews {
    /// A refusal's quote.
    pub fn quote(&self) -> &[u8] {
        match self {
            KernelNews::Refused { quote, len, .. } => &quote[..*len],
            KernelNews::Other => &[],
        }
    }
}

/// Asks the kernel to queue ICMP errors for socket `fd` (of the family
/// `v6` says) with their quotes. Without it a connected socket learns
/// only the error number, an unconnected one nothing.
pub fn set_recverr(fd: BorrowedFd<'_>, v6: bool) -> io::Result<()> {
    if v6 {
        super::sys::set_int_opt(fd, libc::SOL_IPV6, libc::IPV6_RECVERR, 1)
    } else {
        super::sys::set_int_opt(fd, libc::SOL_IP, libc::IP_RECVERR, 1)
    }
}

/// Reads what `fd`'s error queue holds, at most `DRAIN_MAX` records,
/// handing each to `news`. How many it read.
pub fn drain(fd: BorrowedFd<'_>, mut news: impl FnMut(KernelNews)) -> usize {
    let mut n = 0;
    while n < DRAIN_MAX {
        match read_one(fd) {
            Some(item) => news(item),
            None => break,
        }
        n += 1;
    }
    n
}

/// One record off the error queue; None when it is empty.
fn read_one(fd: BorrowedFd<'_>) -> Option<KernelNews> {
    let mut quote = [0u8; QUOTE_LEN];
    // SAFETY: sockaddr_storage is plain C data; zero is a valid value.
    let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    // Room for the extended error and the offender's address, 8-aligned
    // as cmsg headers need.
    let mut ctrl = [0u64; 32];
    let mut iov = libc::iovec {
        iov_base: quote.as_mut_ptr() as *mut libc::c_void,
        iov_len: QUOTE_LEN,
    };
    // SAFETY: msghdr is plain data; zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = &mut name as *mut libc::sockaddr_storage as *mut libc::c_void;
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(&ctrl) as _;
    // SAFETY: every pointer in `msg` is to a local of the size given,
    // exclusively borrowed for the call; the kernel writes at most those
    // sizes (a longer quote is cut, MSG_TRUNC); the borrow keeps `fd` open.
    let r = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
    if r < 0 {
        return None;
    }
    let len = (r as usize).min(QUOTE_LEN);
    // SAFETY: the kernel wrote a sockaddr of msg_namelen bytes into `name`.
    let to = unsafe {
        crate::getinfo::sockaddr_to_std(
            &name as *const libc::sockaddr_storage as *const u8,
            msg.msg_namelen as usize,
        )
    };
    let refused = extended_err(&msg).is_some_and(|e| is_port_unreachable(&e));
    Some(match to {
        Some(to) if refused => KernelNews::Refused { to, quote, len },
        _ => KernelNews::Other,
    })
}

/// The extended error among `msg`'s control messages, if any.
fn extended_err(msg: &libc::msghdr) -> Option<libc::sock_extended_err> {
    // SAFETY: `msg` is what recvmsg filled: msg_control points at a live
    // buffer of which msg_controllen bytes hold well-formed cmsg headers,
    // which CMSG_FIRSTHDR/CMSG_NXTHDR walk without leaving it; the
    // extended error is read unaligned, and only from a header long
    // enough to hold it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            let ours = ((*c).cmsg_level == libc::SOL_IP && (*c).cmsg_type == libc::IP_RECVERR)
                || ((*c).cmsg_level == libc::SOL_IPV6 && (*c).cmsg_type == libc::IPV6_RECVERR);
            let size = std::mem::size_of::<libc::sock_extended_err>();
            if ours && (*c).cmsg_len as usize >= libc::CMSG_LEN(size as u32) as usize {
                return Some(std::ptr::read_unaligned(
                    libc::CMSG_DATA(c) as *const libc::sock_extended_err
                ));
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}

/// Whether `e` is an ICMP or ICMPv6 "port unreachable".
fn is_port_unreachable(e: &libc::sock_extended_err) -> bool {
    match e.ee_origin {
        libc::SO_EE_ORIGIN_ICMP => e.ee_type == ICMP_DEST_UNREACH && e.ee_code == ICMP_PORT_UNREACH,
        libc::SO_EE_ORIGIN_ICMP6 => e.ee_type == ICMP6_DST_UNREACH && e.ee_code == ICMP6_DST_UNREACH_NOPORT,
        _ => false,
    }
}
