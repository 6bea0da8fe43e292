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
        libc::setsockopt(
            fd,
            level,
            name,
            &val as *const i32 as *const libc::c_void,
            std::mem::size_of::<i32>() as u32,
        ) == 0
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
        for (force, plain) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        ] {
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

    /// Receives one datagram into slot 0 of `batch`; false when nothing is
    /// queued. A plain recvfrom costs about a third less than a recvmmsg
    /// that finds the socket empty (no msghdr/iovec import), and an empty
    /// socket is what a polling application sees almost every time.
    pub fn recv_one(&self, batch: &mut RecvBatch) -> io::Result<bool> {
        match self.sock.recv_from(&mut batch.bufs[0]) {
            Ok((n, from)) => {
                batch.one = Some((n, from));
                batch.filled = 1;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Receives what is queued, up to `batch.len()` datagrams, in one
    /// syscall; 0 when nothing is. One recvmmsg instead of a recvfrom per
    /// datagram plus the EAGAIN one that ends the loop, which would sit
    /// between a message's arrival and its completion.
    pub fn recv_batch(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        let n = batch.slots;
        for i in 0..n {
            batch.iov[i] = libc::iovec {
                iov_base: batch.bufs[i].as_mut_ptr() as *mut libc::c_void,
                iov_len: batch.bufs[i].len(),
            };
            let h = &mut batch.hdrs[i].msg_hdr;
            h.msg_name = &mut batch.names[i] as *mut libc::sockaddr_storage as *mut libc::c_void;
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
            h.msg_iov = &mut batch.iov[i];
            h.msg_iovlen = 1;
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
            h.msg_flags = 0;
        }
        // SAFETY: every header points at storage owned by `batch` (names,
        // iovecs, buffers) that outlives the call; vlen matches the arrays.
        let r = unsafe {
            libc::recvmmsg(
                self.fd(),
                batch.hdrs.as_mut_ptr(),
                n as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(0)
            } else {
                Err(e)
            };
        }
        batch.filled = r as usize;
        batch.one = None;
        Ok(r as usize)
    }

    /// Receives one datagram split across three buffers: its first
    /// `head_len` bytes into the batch's head buffer, the next ones into
    /// `region` (an application buffer, so bulk data is not copied again),
    /// the rest into a batch buffer. Ok(None) when nothing is queued;
    /// otherwise the datagram's length and sender. `gather` reassembles it.
    pub fn recv_split(
        &self,
        batch: &mut RecvBatch,
        head_len: usize,
        region: &mut [u8],
    ) -> io::Result<Option<(usize, SocketAddr)>> {
        let head_len = head_len.min(batch.head.len());
        let mut iov = [
            libc::iovec {
                iov_base: batch.head.as_mut_ptr() as *mut libc::c_void,
                iov_len: head_len,
            },
            libc::iovec {
                iov_base: region.as_mut_ptr() as *mut libc::c_void,
                iov_len: region.len(),
            },
            libc::iovec {
                iov_base: batch.bufs[1].as_mut_ptr() as *mut libc::c_void,
                iov_len: batch.bufs[1].len(),
            },
        ];
        // SAFETY: msghdr is plain data; zero is a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = &mut batch.names[0] as *mut libc::sockaddr_storage as *mut libc::c_void;
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len() as _;
        // SAFETY: the iovecs describe three distinct writable buffers we
        // hold exclusive borrows of for the whole call (batch.head,
        // region, batch.bufs[1]) and the name points at batch.names[0].
        let r = unsafe { libc::recvmsg(self.fd(), &mut msg, libc::MSG_DONTWAIT) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(None)
            } else {
                Err(e)
            };
        }
        // SAFETY: the kernel wrote a sockaddr of msg_namelen bytes into names[0].
        let from = unsafe {
            crate::getinfo::sockaddr_to_std(
                &batch.names[0] as *const libc::sockaddr_storage as *const u8,
                msg.msg_namelen as usize,
            )
        };
        let n = r as usize;
        batch.split = (n, head_len, region.len());
        batch.filled = 0;
        Ok(from.map(|f| {
            batch.split_from = Some(f);
            (n, f)
        }))
    }

    /// One datagram gathered from a header and a payload elsewhere in
    /// memory (the application's buffer), without assembling it first.
    /// Ok(false) as for `send`.
    pub fn send2(&self, hdr: &[u8], payload: &[u8], to: SocketAddr) -> io::Result<bool> {
        // SAFETY: sockaddr_storage is plain data; zero is a valid value.
        let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let namelen = match to {
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
        let mut iov = [
            libc::iovec {
                iov_base: hdr.as_ptr() as *mut libc::c_void,
                iov_len: hdr.len(),
            },
            libc::iovec {
                iov_base: payload.as_ptr() as *mut libc::c_void,
                iov_len: payload.len(),
            },
        ];
        // SAFETY: msghdr is plain data; zero is a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = &mut name as *mut libc::sockaddr_storage as *mut libc::c_void;
        msg.msg_namelen = namelen as libc::socklen_t;
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len() as _;
        // SAFETY: msg points at the address and the two iovecs above, which
        // describe readable memory (the slices) for the whole call; the
        // kernel only reads them.
        let r = unsafe { libc::sendmsg(self.fd(), &msg, libc::MSG_DONTWAIT) };
        if r >= 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock {
            Ok(false)
        } else {
            Err(e)
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

/// Storage for one `recvmmsg`: buffers big enough for any datagram.
pub struct RecvBatch {
    slots: usize,
    bufs: Vec<Vec<u8>>,
    iov: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    hdrs: Vec<libc::mmsghdr>,
    filled: usize,
    /// Set by `recv_one` (which fills no mmsghdr).
    one: Option<(usize, SocketAddr)>,
    /// `recv_split`: the header part, and (length, head length, region length).
    head: [u8; 64],
    split: (usize, usize, usize),
    split_from: Option<SocketAddr>,
}

// SAFETY: the raw pointers inside point only into the batch's own vectors
// and are rewritten before every use.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    pub fn new(slots: usize) -> RecvBatch {
        // recv_split needs a second buffer for what overflows the region.
        let slots = slots.max(2);
        RecvBatch {
            slots,
            bufs: (0..slots).map(|_| vec![0u8; 65536]).collect(),
            // SAFETY: iovec, sockaddr_storage and mmsghdr are plain C data; zero is valid.
            iov: (0..slots).map(|_| unsafe { std::mem::zeroed() }).collect(),
            names: (0..slots).map(|_| unsafe { std::mem::zeroed() }).collect(),
            hdrs: (0..slots).map(|_| unsafe { std::mem::zeroed() }).collect(),
            filled: 0,
            one: None,
            head: [0; 64],
            split: (0, 0, 0),
            split_from: None,
        }
    }

    /// The header part of the last `recv_split` datagram.
    pub fn head(&self) -> &[u8] {
        let (n, h, _) = self.split;
        &self.head[..n.min(h)]
    }

    /// Reassembles the last `recv_split` datagram (given the region it was
    /// received into) so that `get(0)` returns it whole.
    pub fn gather(&mut self, region: &[u8]) {
        let (n, h, r) = self.split;
        let Some(from) = self.split_from.take() else { return };
        let hn = n.min(h);
        let rn = (n - hn).min(r);
        let tail = n - hn - rn;
        let (first, rest) = self.bufs.split_at_mut(1);
        let dst = &mut first[0];
        dst[..hn].copy_from_slice(&self.head[..hn]);
        dst[hn..hn + rn].copy_from_slice(&region[..rn]);
        dst[hn + rn..n].copy_from_slice(&rest[0][..tail]);
        self.one = Some((n, from));
        self.filled = 1;
    }

    /// Datagram `i` of the last receive and its sender.
    pub fn get(&self, i: usize) -> Option<(&[u8], SocketAddr)> {
        if i >= self.filled {
            return None;
        }
        if let Some((n, from)) = self.one {
            return Some((&self.bufs[0][..n], from));
        }
        let len = self.hdrs[i].msg_len as usize;
        // SAFETY: the kernel wrote a sockaddr of msg_namelen bytes into names[i].
        let from = unsafe {
            crate::getinfo::sockaddr_to_std(
                &self.names[i] as *const libc::sockaddr_storage as *const u8,
                self.hdrs[i].msg_hdr.msg_namelen as usize,
            )
        }?;
        Some((&self.bufs[i][..len.min(self.bufs[i].len())], from))
    }
}
