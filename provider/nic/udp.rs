//! The udp wire's I/O: one non-blocking datagram socket per endpoint,
//! bound to a concrete interface address (never the wildcard: the address
//! a peer sees on our datagrams must be the one `fi_getname` reports, since
//! that is what the peer's AV holds).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};

pub struct UdpWire {
    sock: std::net::UdpSocket,
    local: SocketAddr,
    /// Largest datagram the interface carries without IP fragmentation.
    pub max_datagram: usize,
    /// The same towards peers on this host, which the kernel routes
    /// through loopback whatever interface they are bound to.
    pub local_max_datagram: usize,
}

fn setsockopt_int(fd: RawFd, level: i32, name: i32, val: i32) -> bool {
    // SAFETY: passes a valid int of the size given.
    unsafe {
        libc::setsockopt(fd, level, name, &val as *const i32 as *const libc::c_void, std::mem::size_of::<i32>() as u32) == 0
    }
}

/// MTU of the named interface (SIOCGIFMTU).
fn iface_mtu(fd: RawFd, name: &str) -> Option<usize> {
    // SAFETY: ifreq is plain data; the ioctl fills ifru_mtu for the named interface.
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

impl UdpWire {
    pub fn bind(addr: SocketAddr, iface: &str, sockbuf: usize, mtu_override: usize) -> io::Result<UdpWire> {
        let sock = std::net::UdpSocket::bind(addr)?;
        sock.set_nonblocking(true)?;
        let fd = sock.as_raw_fd();
        let buf = sockbuf.min(i32::MAX as usize) as i32;
        // Root may exceed net.core.[rw]mem_max; others get what the sysctl allows.
        for (force, plain) in [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)] {
            if !setsockopt_int(fd, libc::SOL_SOCKET, force, buf) {
                setsockopt_int(fd, libc::SOL_SOCKET, plain, buf);
            }
        }
        let local = sock.local_addr()?;
        let hdr = if local.is_ipv4() { 28 } else { 48 };
        let limit = 65507 - if local.is_ipv4() { 0 } else { 20 };
        let mtu = |name: &str, default: usize| iface_mtu(fd, name).map(|m| m.saturating_sub(hdr)).unwrap_or(default);
        let (max_datagram, local_max_datagram) = match mtu_override {
            0 => (mtu(iface, 1472), mtu("lo", 1472)),
            m => (m, m),
        };
        Ok(UdpWire {
            sock,
            local,
            max_datagram: max_datagram.clamp(512, limit),
            local_max_datagram: local_max_datagram.clamp(512, limit),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Ok(None) when nothing is queued.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<(usize, SocketAddr)>> {
        match self.sock.recv_from(buf) {
            Ok((n, from)) => Ok(Some((n, from))),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Ok(false) when the socket buffer is full (retry later; the
    /// reliability layer retransmits if we drop it instead).
    pub fn send(&self, buf: &[u8], to: SocketAddr) -> io::Result<bool> {
        match self.sock.send_to(buf, to) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }
}
