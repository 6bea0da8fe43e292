//! The system calls of the udp wire that rustix cannot make, on `libc`
//! (see the parent module's head for why each one): socket options it has
//! no setter for, the receives that need a msghdr or the raw syscall, and
//! the conversion of an address into a sockaddr for them. Each unsafe
//! block says why it is sound.

use super::{RecvBatch, CMSG_SPACE, UDP_GRO};
use rustix::net::sockopt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Turns UDP_GRO on (rustix has no setter for it); false if refused.
pub(super) fn set_udp_gro(fd: BorrowedFd<'_>) -> bool {
    set_int_opt(fd, libc::SOL_UDP, UDP_GRO, 1).is_ok()
}

/// Sets the int socket option `name` at `level` to `v`: for the options
/// rustix has no setter for (UDP_GRO, IP_RECVERR).
pub(super) fn set_int_opt(fd: BorrowedFd<'_>, level: i32, name: i32, v: i32) -> io::Result<()> {
    // SAFETY: passes a valid int of the size given, on a descriptor the
    // borrow keeps open.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            &v as *const i32 as *const libc::c_void,
            std::mem::size_of::<i32>() as u32,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// MTU of the named interface (SIOCGIFMTU; rustix has no wrapper for it).
pub(super) fn iface_mtu(fd: BorrowedFd<'_>, name: &str) -> Option<usize> {
    let fd = fd.as_raw_fd();
    // SAFETY: ifreq is plain data; the ioctl fills ifru_mtu for the named
    // interface, on a descriptor the borrow keeps open.
    unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        let bytes = name.as_bytes();
        if bytes.len() >= req.ifr_name.len() {
            return None;
        }
        for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        if libc::ioctl(fd, libc::SIOCGIFMTU, &mut req) != 0 {
            return None;
        }
        Some(req.ifr_ifru.ifru_mtu as usize)
    }
}

/// Sets both socket buffers to `sockbuf` bytes. Root may exceed
/// net.core.[rw]mem_max; others get what the sysctl allows.
pub(super) fn size_buffers(fd: BorrowedFd<'_>, sockbuf: usize) {
    let buf = sockbuf.min(i32::MAX as usize);
    // What the kernel refuses (the *FORCE options need CAP_NET_ADMIN, the
    // plain ones cap at the sysctl) leaves the size it allows.
    if sockopt::set_socket_recv_buffer_size_force(fd, buf).is_err() {
        let _ = sockopt::set_socket_recv_buffer_size(fd, buf);
    }
    if sockopt::set_socket_send_buffer_size_force(fd, buf).is_err() {
        let _ = sockopt::set_socket_send_buffer_size(fd, buf);
    }
}

/// One recvmsg on `fd` into `iov` (buffers the caller holds exclusively), the
/// sender's address into the batch's first name slot and the GRO
/// segment size from its first control buffer. None when nothing is
/// queued; else the datagram's length, its sender (None if the address
/// is not one we read) and the GRO segment size (0: one datagram).
pub(super) fn recvmsg_slot0(
    fd: BorrowedFd<'_>,
    batch: &mut RecvBatch,
    iov: &mut [libc::iovec],
) -> io::Result<Option<(usize, Option<SocketAddr>, usize)>> {
    // SAFETY: msghdr is plain data; zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = &mut batch.names[0] as *mut libc::sockaddr_storage as *mut libc::c_void;
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    msg.msg_control = batch.ctrl[0].as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = CMSG_SPACE as _;
    // SAFETY: the iovecs describe writable buffers the caller holds
    // exclusive borrows of for the whole call; the name and control
    // buffer point at batch.names[0] and batch.ctrl[0], borrowed here;
    // the borrow keeps `fd` open.
    let r = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if r < 0 {
        return nothing_queued_or_err().map(|()| None);
    }
    // SAFETY: the kernel wrote a sockaddr of msg_namelen bytes into names[0].
    let from = unsafe {
        crate::getinfo::sockaddr_to_std(
            &batch.names[0] as *const libc::sockaddr_storage as *const u8,
            msg.msg_namelen as usize,
        )
    };
    Ok(Some((r as usize, from, gro_size(&msg))))
}

/// A nonblocking receive failed (the call returned -1): Ok when it found
/// nothing queued (EAGAIN), else the error. errno is read directly: an
/// `io::Error`'s `kind()` and drop were about 30 instructions of every
/// empty poll.
pub(super) fn nothing_queued_or_err() -> io::Result<()> {
    // SAFETY: __errno_location returns this thread's errno, always valid.
    let errno = unsafe { *libc::__errno_location() };
    if errno == libc::EAGAIN || errno == libc::EWOULDBLOCK {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(errno))
    }
}

/// recvfrom into `buf`: Ok(None) when nothing is queued.
///
/// The syscall itself, not libc's `recvfrom`: that one is a thread
/// cancellation point, and switching asynchronous cancellation on and
/// off around the call was about 60 of the ~650 instructions of a
/// polling pass that finds the socket empty (callgrind), std's wrapper
/// and its `io::Error` for EAGAIN about 70 more. Nothing here cancels
/// threads.
pub(super) fn recv_from(sock: &std::net::UdpSocket, buf: &mut [u8]) -> io::Result<Option<(usize, SocketAddr)>> {
    // SAFETY: sockaddr_storage is plain C data; zero is a valid value.
    let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `name` is writable storage of `len` bytes, both ours for
    // the call.
    let r = unsafe {
        nonblocking_recvfrom(
            sock,
            buf,
            &mut name as *mut libc::sockaddr_storage as *mut libc::sockaddr,
            &mut len,
        )
    };
    if r < 0 {
        return nothing_queued_or_err().map(|()| None);
    }
    // SAFETY: the kernel wrote a sockaddr of `len` bytes into `name`.
    let from =
        unsafe { crate::getinfo::sockaddr_to_std(&name as *const libc::sockaddr_storage as *const u8, len as usize) };
    // An address family we do not read (none can reach a UDP/IP socket):
    // dropped as if nothing had come.
    Ok(from.map(|f| (r as usize, f)))
}

/// recvfrom(2) on `sock` into `buf`, not waiting; the sender's address
/// into `name` (`len`: its room, then its length) unless both are NULL.
///
/// # Safety
/// `name` and `len` are both NULL, or `len` points at the size of the
/// storage `name` points at, both writable for the call.
unsafe fn nonblocking_recvfrom(
    sock: &std::net::UdpSocket,
    buf: &mut [u8],
    name: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> libc::c_long {
    // SAFETY: recvfrom(2) writes at most buf.len() bytes into `buf`, which
    // we borrow exclusively, and the address as the caller vouched; the
    // borrow of `sock` keeps the fd open.
    unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            sock.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
            libc::MSG_DONTWAIT,
            name,
            len,
        )
    }
}

/// recv into `buf` on a socket connected to its only sender: recvfrom
/// without the address (which the caller knows), Ok(None) when nothing
/// is queued. The address costs the kernel a copy out and two more user
/// accesses a datagram (bench/udpfloor with and without it: some 0.05 us
/// of an 8-byte one-way across the namespaces' veth).
pub(super) fn recv_connected(sock: &std::net::UdpSocket, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: no address asked for (both pointers NULL).
    let r = unsafe { nonblocking_recvfrom(sock, buf, std::ptr::null_mut(), std::ptr::null_mut()) };
    if r < 0 {
        return nothing_queued_or_err().map(|()| None);
    }
    Ok(Some(r as usize))
}

/// The GRO segment size in a received message's control data, or 0.
pub(super) fn gro_size(h: &libc::msghdr) -> usize {
    if h.msg_controllen == 0 || h.msg_control.is_null() {
        return 0;
    }
    // SAFETY: the kernel filled msg_control with msg_controllen bytes of
    // well-formed cmsg headers; the CMSG_* macros stay within them.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const i32);
                return v.max(0) as usize;
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    0
}

pub(super) fn sockaddr_of(to: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; zero is a valid value.
    let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match to {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let sin = unsafe { &mut *(&mut name as *mut libc::sockaddr_storage as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr = libc::in_addr {
                s_addr: u32::from_ne_bytes(a.ip().octets()),
            };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut name as *mut libc::sockaddr_storage as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_addr = libc::in6_addr {
                s6_addr: a.ip().octets(),
            };
            sin6.sin6_scope_id = a.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (name, len as libc::socklen_t)
}
