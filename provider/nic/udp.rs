//! The udp wire's I/O: one non-blocking datagram socket per endpoint,
//! bound to a concrete interface address (never the wildcard: the address
//! a peer sees on our datagrams must be the one `fi_getname` reports, since
//! that is what the peer's AV holds), plus up to a few sockets of that same
//! address connected to one busy peer each (`UdpSockets::connect`).
//!
//! Sockets, socket options, the epoll set and plain datagram sends go
//! through `rustix` (owned descriptors, checked errors). What stays
//! hand-written on `libc`, because rustix cannot do it: the UDP_SEGMENT
//! (GSO) and UDP_GRO control messages and the UDP_GRO option (rustix's
//! ancillary types carry only SCM_RIGHTS/CREDENTIALS/TXTIME and it has no
//! UDP_GRO setter), so every `sendmsg`/`recvmsg` that carries or may
//! receive one; `recvmmsg` (not in rustix); the gather of one GSO run from
//! header slots and user buffers into one `sendmsg`; the receive placed
//! into a guessed user buffer (`recv_split`); and SIOCGIFMTU (no rustix
//! wrapper). Each such block says why it is sound. The calls that need
//! no state of `UdpSockets` live in `udp/sys.rs`; the error queue, where
//! the kernel reports ICMP errors (a dead peer's closed port), in
//! `udp/errqueue.rs`.

pub use errqueue::KernelNews;
use rustix::event::epoll;
use rustix::io::Errno;
use rustix::net::sockopt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use sys::{
    gro_size, iface_mtu, nothing_queued_or_err, recv_from, recvmsg_slot0, set_udp_gro, size_buffers, sockaddr_of,
};

/// linux/udp.h (not in libc for glibc targets).
const UDP_SEGMENT: i32 = 103;
const UDP_GRO: i32 = 104;
/// Most segments one GSO send carries (the kernel allows 64 or more).
const GSO_MAX_SEGS: usize = 64;
/// Most bytes one GSO send carries: one IP datagram's worth.
const GSO_MAX_BYTES: usize = 65_000;
/// With `main_rarely`: how often the main socket is polled.
const MAIN_POLL_EVERY: u32 = 8;
/// More sockets than this: one epoll_wait says which have datagrams,
/// rather than a recvfrom on each.
const DIRECT_POLL_MAX: usize = 2;
const _: () = assert!(DIRECT_POLL_MAX <= 8, "recv_any polls directly at most 8 sockets");
/// Room for one cmsg carrying an int (the GRO segment size).
const CMSG_SPACE: usize = 64;

/// A socket of the endpoint's own address connected to one peer (it shares
/// the port with the main socket through SO_REUSEPORT). The kernel prefers a
/// connected socket when it looks up where a datagram goes, so that peer's
/// datagrams arrive here and not on the main socket. What that buys: the
/// receive path finds the socket and its route without a lookup (early
/// demux), and a send needs no route lookup either. About 0.3 µs of an
/// 8-byte one-way on loopback, more across a veth pair.
struct Connected {
    peer: SocketAddr,
    sock: std::net::UdpSocket,
    /// The socket was found empty once since its connect: whatever it
    /// holds now came from `peer` (datagrams from anyone may have been
    /// queued between its bind and its connect, when it was one more
    /// unconnected socket of the port's group), so `recv_one` reads
    /// without asking for the sender's address.
    only_peer: std::cell::Cell<bool>,
}

pub struct UdpSockets {
    sock: std::net::UdpSocket,
    local: SocketAddr,
    /// Sockets connected to one peer each (see `Connected`), at most
    /// `max_connected`, polled before the main socket.
    connected: Vec<Connected>,
    max_connected: usize,
    /// The socket the last datagram came from (an index into `connected`,
    /// or `connected.len()` for the main socket): `recv_batch` drains it.
    hot: std::cell::Cell<usize>,
    /// An epoll set of all our sockets: what a sleeper waits on (an epoll
    /// fd is readable while any socket in it is), so that sockets come and
    /// go without the wait objects and the progress thread knowing.
    epoll: std::os::fd::OwnedFd,
    /// Whether the sockets are in `epoll` (`watch`). Not until someone
    /// sleeps or there are too many sockets to poll directly: a socket in
    /// an epoll set costs every arriving datagram an epoll callback in the
    /// kernel, measurable on a ping-pong that only ever polls.
    watched: std::cell::Cell<bool>,
    /// How many peers the endpoint talks to (`set_peer_count`). When every
    /// one has a connected socket the main socket only gets new peers'
    /// first datagrams (and shm doorbells), and is polled once in
    /// `MAIN_POLL_EVERY` receives instead of doubling the syscalls of every
    /// empty poll.
    peers: usize,
    polls: std::cell::Cell<u32>,
    sockbuf: usize,
    /// UDP_GRO may be turned on (`tune_gro`): not on a loopback address,
    /// whose peers are all on this host and never send GSO runs.
    gro_capable: bool,
    /// UDP_GRO is on: the kernel may hand us several datagrams of one
    /// sender as one, with their common size in a control message, which
    /// recvfrom cannot return: receives need recvmsg, ~0.2 µs dearer on an
    /// 8-byte ping-pong. So it goes on only once bulk data arrives, and
    /// stays on: the kernel stops attaching the segment size as soon as
    /// GRO is off, also to runs it coalesced before, so turning it off
    /// could hand us several datagrams as one.
    gro: std::cell::Cell<bool>,
    /// UDP_SEGMENT works: a run of equal-sized datagrams to one peer goes
    /// down the stack (and across a veth or a NIC with segmentation
    /// offload) as one, instead of one syscall and one skb each.
    gso: std::cell::Cell<bool>,
    /// Largest datagram the interface carries without IP fragmentation.
    pub max_datagram: usize,
    /// The same towards peers on this host, which the kernel routes
    /// through loopback whatever interface they are bound to.
    pub local_max_datagram: usize,
    /// Bytes of datagrams the receive buffer holds (what SO_RCVBUF granted,
    /// which without privileges is capped by net.core.rmem_max).
    pub rcvbuf: usize,
    /// Refusals read off the sockets' error queues (errqueue.rs) for the
    /// engine to judge (`take_news`): one per destination, at most
    /// `NEWS_MAX`. Whether there are any, read on every progress pass.
    news: std::cell::RefCell<Vec<KernelNews>>,
    has_news: std::cell::Cell<bool>,
    /// Error-queue records that were not refusals (another ICMP error:
    /// the reliability layer copes), or refusals beyond `NEWS_MAX`.
    other_errors: std::cell::Cell<u64>,
    /// System calls that sent datagrams (a GSO run is one): against the
    /// engine's `datagrams_out`, how well sends are batched.
    send_calls: std::cell::Cell<u64>,
}

/// Most refusals kept between two progress passes (`UdpSockets::news`).
const NEWS_MAX: usize = 32;

/// Puts socket `fd` into `set` for input, with its number as the event's data.
fn epoll_add(set: &std::os::fd::OwnedFd, fd: BorrowedFd<'_>) -> io::Result<()> {
    let data = epoll::EventData::new_u64(fd.as_raw_fd() as u64);
    Ok(epoll::add(set, fd, data, epoll::EventFlags::IN)?)
}

/// Asks for ICMP errors on `fd`'s error queue (errqueue.rs). A kernel
/// that refuses leaves the udp wire learning of dead peers from their
/// silence only.
fn recverr(fd: BorrowedFd<'_>, v6: bool) {
    if let Err(e) = errqueue::set_recverr(fd, v6) {
        crate::info!(
            crate::ffi::FI_LOG_EP_CTRL,
            "IP_RECVERR refused ({}): dead peers known by their silence",
            e
        );
    }
}

/// A send's outcome: Ok(false) when the socket buffer is full.
fn sent(r: rustix::io::Result<usize>) -> io::Result<bool> {
    match r {
        Ok(_) => Ok(true),
        Err(Errno::AGAIN) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

impl UdpSockets {
    /// `max_connected`: how many peers may get a connected socket (0: none,
    /// everything goes through the one socket bound to `addr`).
    pub fn bind(
        addr: SocketAddr,
        iface: &str,
        sockbuf: usize,
        mtu_override: usize,
        max_connected: usize,
    ) -> io::Result<UdpSockets> {
        let sock = std::net::UdpSocket::bind(addr)?;
        sock.set_nonblocking(true)?;
        let fd = sock.as_fd();
        size_buffers(fd, sockbuf);
        // Only after the bind, so the port was picked (or checked) as one
        // nobody else holds: another socket can join it only with
        // SO_REUSEPORT set before its own bind, and only under our uid,
        // which our connected sockets are. (An unrelated process of ours
        // that did so could take datagrams, but it could as well ptrace us.)
        let max_connected = if max_connected > 0 && sockopt::set_socket_reuseport(fd, true).is_ok() {
            max_connected
        } else {
            0
        };
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        recverr(fd, addr.is_ipv6());
        // The kernel reports twice what it grants for data (the rest is
        // its bookkeeping per datagram).
        let rcvbuf = match sockopt::socket_recv_buffer_size(fd) {
            Ok(got) if got > 0 => got / 2,
            _ => sockbuf,
        };
        let local = sock.local_addr()?;
        let hdr = if local.is_ipv4() { 28 } else { 48 };
        let limit = 65507 - if local.is_ipv4() { 0 } else { 20 };
        let mtu = |name: &str, default: usize| iface_mtu(fd, name).map(|m| m.saturating_sub(hdr)).unwrap_or(default);
        let (max_datagram, local_max_datagram) = match mtu_override {
            0 => (mtu(iface, 1472), mtu("lo", 1472)),
            m => (m, m),
        };
        Ok(UdpSockets {
            sock,
            local,
            connected: Vec::new(),
            max_connected,
            hot: std::cell::Cell::new(0),
            epoll,
            watched: std::cell::Cell::new(false),
            peers: 0,
            polls: std::cell::Cell::new(0),
            sockbuf,
            gro_capable: !addr.ip().is_loopback(),
            gro: std::cell::Cell::new(false),
            gso: std::cell::Cell::new(true),
            max_datagram: max_datagram.clamp(512, limit),
            local_max_datagram: local_max_datagram.clamp(512, limit),
            rcvbuf,
            news: std::cell::RefCell::new(Vec::new()),
            has_news: std::cell::Cell::new(false),
            other_errors: std::cell::Cell::new(0),
            send_calls: std::cell::Cell::new(0),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// What a sleeper waits on: readable while any of our sockets is, once
    /// `watch` was called (before sleeping on it).
    pub fn wait_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// Puts our sockets, and from now on every new one, into the epoll set
    /// `wait_fd` returns: whoever is about to sleep on it calls this first.
    pub fn watch(&self) -> io::Result<()> {
        if self.watched.get() {
            return Ok(());
        }
        for i in 0..self.socks() {
            epoll_add(&self.epoll, self.sock_at(i).as_fd())?;
        }
        self.watched.set(true);
        Ok(())
    }

    /// Takes our sockets out of the epoll set again: nobody sleeps on it
    /// any more. A socket in an epoll set runs the set's wake-up callback
    /// in the kernel for every datagram that reaches it and every one it
    /// sends (the freed send buffer's wake-up), and across a veth the
    /// sender's call pays the receiver's: 0.3 us or more of a one-way trip
    /// (bench/README.md, "Sockets out of the epoll set while the
    /// application polls"). Kept while `recv_any` asks the set which
    /// socket has data.
    pub fn unwatch(&self) {
        if !self.watched.get() || self.socks() > DIRECT_POLL_MAX {
            return;
        }
        for i in 0..self.socks() {
            // A socket that is not in the set: nothing to take out.
            let _ = epoll::delete(&self.epoll, self.sock_at(i).as_fd());
        }
        self.watched.set(false);
    }

    /// Whether our sockets are in the epoll set (`watch`).
    pub fn watched(&self) -> bool {
        self.watched.get()
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Socket `i`: a connected one, or (`i == connected.len()`) the main one.
    fn sock_at(&self, i: usize) -> &std::net::UdpSocket {
        self.connected.get(i).map_or(&self.sock, |c| &c.sock)
    }

    /// How many sockets `recv_*` poll.
    fn socks(&self) -> usize {
        self.connected.len() + 1
    }

    /// The socket that sends to `to`, and whether it is connected (then the
    /// destination must not be named).
    fn sock_for(&self, to: SocketAddr) -> (BorrowedFd<'_>, bool) {
        match self.connected.iter().find(|c| c.peer == to) {
            Some(c) => (c.sock.as_fd(), true),
            None => (self.fd(), false),
        }
    }

    /// Whether `peer` has a connected socket.
    fn is_connected(&self, peer: SocketAddr) -> bool {
        self.connected.iter().any(|c| c.peer == peer)
    }

    /// Whether another peer may get a connected socket.
    fn may_connect(&self) -> bool {
        self.connected.len() < self.max_connected
    }

    /// Gives `peer` a socket of our address connected to it (see
    /// `Connected`); a no-op when it has one or none are left. Datagrams
    /// the main socket already holds from the peer are still read there,
    /// so a few may arrive out of order once: the VC reorders them.
    pub fn connect(&mut self, peer: SocketAddr) -> io::Result<()> {
        if !self.may_connect()
            || self.is_connected(peer)
            || peer == self.local
            || peer.is_ipv4() != self.local.is_ipv4()
        {
            return Ok(());
        }
        use rustix::net::{AddressFamily, SocketFlags, SocketType};
        let family = if self.local.is_ipv4() {
            AddressFamily::INET
        } else {
            AddressFamily::INET6
        };
        let fd = rustix::net::socket_with(
            family,
            SocketType::DGRAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            None,
        )?;
        // SO_REUSEPORT before the bind, to share the main socket's port.
        sockopt::set_socket_reuseport(&fd, true)?;
        size_buffers(fd.as_fd(), self.sockbuf);
        if self.gro.get() {
            set_udp_gro(fd.as_fd());
        }
        recverr(fd.as_fd(), self.local.is_ipv6());
        rustix::net::bind(&fd, &self.local)?;
        let sock = std::net::UdpSocket::from(fd);
        sock.connect(peer)?;
        if self.watched.get() {
            epoll_add(&self.epoll, sock.as_fd())?;
        }
        self.connected.push(Connected {
            peer,
            sock,
            only_peer: std::cell::Cell::new(false),
        });
        self.hot.set(0);
        if self.socks() > DIRECT_POLL_MAX {
            // recv_any asks the epoll set which sockets have data.
            self.watch()?;
        }
        Ok(())
    }

    /// Closes `peer`'s connected socket, if it has one (the VC is gone).
    /// What it still holds is lost, as it would be on a VC that failed.
    pub fn disconnect(&mut self, peer: SocketAddr) {
        if let Some(i) = self.connected.iter().position(|c| c.peer == peer) {
            // Closing the fd also takes it out of the epoll set.
            self.connected.swap_remove(i);
            self.hot.set(0);
        }
    }

    /// `call` on socket `fd`, made once more if it failed on news: an
    /// error is read as news first (`news_after_error`), and if the queue
    /// held any, the error was probably the socket's pending one, which
    /// the call returned instead of doing its work.
    fn once_more_after_news<T>(&self, fd: BorrowedFd<'_>, mut call: impl FnMut() -> io::Result<T>) -> io::Result<T> {
        match call() {
            Err(_) if self.news_after_error(fd) => call(),
            r => r,
        }
    }

    /// A call on socket `fd` failed: reads what its error queue holds
    /// (errqueue.rs), keeping the refusals for `take_news`. Whether it
    /// held anything.
    fn news_after_error(&self, fd: BorrowedFd<'_>) -> bool {
        errqueue::drain(fd, |n| {
            let mut news = self.news.borrow_mut();
            match n {
                KernelNews::Refused { to, .. } if news.len() < NEWS_MAX => {
                    // One per destination: the first names the VC as
                    // well as the rest, which its end makes moot.
                    if !news
                        .iter()
                        .any(|m| matches!(m, KernelNews::Refused { to: t, .. } if *t == to))
                    {
                        news.push(n);
                        self.has_news.set(true);
                    }
                }
                _ => self.other_errors.set(self.other_errors.get() + 1),
            }
        }) > 0
    }

    /// Whether refusals wait for `take_news`.
    #[inline]
    pub fn has_news(&self) -> bool {
        self.has_news.get()
    }

    /// The refusals read since the last call.
    pub fn take_news(&self) -> Vec<KernelNews> {
        self.has_news.set(false);
        std::mem::take(&mut *self.news.borrow_mut())
    }

    /// Error-queue records that were not refusals (`other_errors`).
    pub fn other_errors(&self) -> u64 {
        self.other_errors.get()
    }

    /// System calls that sent datagrams (`send_calls`).
    pub fn send_calls(&self) -> u64 {
        self.send_calls.get()
    }

    /// How many peers have a connected socket.
    pub fn connected_count(&self) -> usize {
        self.connected.len()
    }

    /// Tells the wire how many peers the endpoint talks to (see `peers`).
    pub fn set_peer_count(&mut self, peers: usize) {
        self.peers = peers;
    }

    /// Every peer has a connected socket (see `peers`).
    fn main_rarely(&self) -> bool {
        !self.connected.is_empty() && self.connected.len() >= self.peers
    }

    /// One contiguous datagram (small messages, stashed ones): sendto, or
    /// send on a connected socket, spares the kernel importing a msghdr and
    /// an iovec, which shows on an 8-byte ping-pong. Ok(false) when the
    /// socket buffer is full.
    fn send_datagram(&self, bytes: &[u8], to: SocketAddr) -> io::Result<bool> {
        use rustix::net::SendFlags;
        let (fd, connected) = self.sock_for(to);
        self.send_calls.set(self.send_calls.get() + 1);
        let send = || match connected {
            // A connected socket sends without naming the destination.
            true => sent(rustix::net::send(fd, bytes, SendFlags::DONTWAIT)),
            false => sent(rustix::net::sendto(fd, bytes, SendFlags::DONTWAIT, &to)),
        };
        self.once_more_after_news(fd, send)
    }

    /// Polls the sockets in turn (connected ones first) with `recv` until
    /// one gives a datagram; remembers which in `hot`. A socket's error
    /// (the news of an ICMP error, such as ECONNREFUSED when a peer's port
    /// is closed) is not the others': the rest are still polled. It is
    /// read off the socket's error queue (`news_after_error`), and the
    /// socket polled again: it may hold datagrams.
    fn recv_any<T>(
        &self,
        mut recv: impl FnMut(usize, &std::net::UdpSocket) -> io::Result<Option<T>>,
    ) -> io::Result<Option<T>> {
        let n = self.socks();
        let mut ready = [0usize; 8];
        let mut count = 0;
        if n > DIRECT_POLL_MAX {
            let empty = epoll::Event {
                flags: epoll::EventFlags::empty(),
                data: epoll::EventData::new_u64(0),
            };
            let mut evs = [empty; 8];
            let zero = rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 };
            // A failed wait (EINTR) finds nothing this round.
            let r = epoll::wait(&self.epoll, &mut evs, Some(&zero)).unwrap_or(0);
            for ev in &evs[..r] {
                let (fd, flags) = (ev.data.u64() as RawFd, ev.flags);
                if let Some(i) = (0..n).find(|&i| self.sock_at(i).as_raw_fd() == fd) {
                    if flags.contains(epoll::EventFlags::ERR) {
                        // Whatever consumed the socket's error left its
                        // queue: read it, or EPOLLERR stays up.
                        self.news_after_error(self.sock_at(i).as_fd());
                    }
                    ready[count] = i;
                    count += 1;
                }
            }
        } else {
            count = n;
            if self.main_rarely() {
                let p = self.polls.get().wrapping_add(1);
                self.polls.set(p);
                if !p.is_multiple_of(MAIN_POLL_EVERY) {
                    count = n - 1;
                }
            }
            for (i, r) in ready.iter_mut().enumerate().take(count) {
                *r = i;
            }
        }
        let mut err = None;
        for &i in &ready[..count] {
            let sock = self.sock_at(i);
            match self.once_more_after_news(sock.as_fd(), || recv(i, sock)) {
                Ok(Some(r)) => {
                    self.hot.set(i);
                    return Ok(Some(r));
                }
                Ok(None) => {}
                Err(e) => err = Some(e),
            }
        }
        err.map_or(Ok(None), Err)
    }

    /// Receives one datagram into slot 0 of `batch`; false when nothing is
    /// queued. A plain recvfrom costs about a third less than a recvmmsg
    /// that finds the socket empty (no msghdr/iovec import), and an empty
    /// socket is what a polling application sees almost every time.
    pub fn recv_one(&self, batch: &mut RecvBatch) -> io::Result<bool> {
        if self.gro.get() {
            // Coalesced datagrams need the control message that says where
            // one ends; recvmsg is the next cheapest (recvmmsg of one costs more).
            return self.recv_msg(batch);
        }
        let buf = &mut batch.bufs[0];
        let r = self.recv_any(|i, s| match self.connected.get(i) {
            Some(c) if c.only_peer.get() => Ok(sys::recv_connected(s, buf)?.map(|n| (n, c.peer))),
            Some(c) => {
                let r = recv_from(s, buf)?;
                c.only_peer.set(r.is_none());
                Ok(r)
            }
            None => recv_from(s, buf),
        })?;
        match r {
            Some((n, from)) => {
                batch.one = Some((n, from));
                batch.gso[0] = 0;
                batch.filled = 1;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Receives what is queued on the socket the last datagram came from,
    /// up to `batch.len()` datagrams, in one syscall; 0 when nothing is.
    /// One recvmmsg instead of a recvfrom per datagram plus the EAGAIN one
    /// that ends the loop, which would sit between a message's arrival and
    /// its completion.
    pub fn recv_batch(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        let i = self.hot.get().min(self.socks() - 1);
        let fd = self.sock_at(i).as_fd();
        self.once_more_after_news(fd, || self.recv_batch_n(fd, batch, batch.slots))
    }

    fn recv_msg(&self, batch: &mut RecvBatch) -> io::Result<bool> {
        let mut iov = [libc::iovec {
            iov_base: batch.bufs[0].as_mut_ptr() as *mut libc::c_void,
            iov_len: batch.bufs[0].len(),
        }];
        let Some((n, from, gso)) = self.recv_any(|_, s| recvmsg_slot0(s.as_fd(), batch, &mut iov))? else {
            return Ok(false);
        };
        let Some(from) = from else { return Ok(false) };
        batch.gso[0] = gso;
        batch.one = Some((n, from));
        batch.filled = 1;
        Ok(true)
    }

    /// recvmmsg (not in rustix; the GRO size arrives as a control message).
    fn recv_batch_n(&self, fd: BorrowedFd<'_>, batch: &mut RecvBatch, n: usize) -> io::Result<usize> {
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
            h.msg_control = batch.ctrl[i].as_mut_ptr() as *mut libc::c_void;
            h.msg_controllen = CMSG_SPACE as _;
            h.msg_flags = 0;
        }
        // SAFETY: every header points at storage owned by `batch` (names,
        // iovecs, buffers) that outlives the call; vlen matches the arrays;
        // the borrow keeps `fd` open.
        let r = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                batch.hdrs.as_mut_ptr(),
                n as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            return nothing_queued_or_err().map(|()| 0);
        }
        batch.filled = r as usize;
        batch.one = None;
        for i in 0..batch.filled {
            batch.gso[i] = gro_size(&batch.hdrs[i].msg_hdr);
        }
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
        let Some((n, from, gso)) = self.recv_any(|_, s| recvmsg_slot0(s.as_fd(), batch, &mut iov))? else {
            return Ok(None);
        };
        batch.split = (n, head_len, region.len());
        batch.gso[0] = gso;
        batch.filled = 0;
        Ok(from.map(|f| {
            batch.split_from = Some(f);
            (n, f)
        }))
    }

    /// Sends what `tx` holds: first what an earlier call could not send,
    /// then the batch being built. false when the socket buffer is full
    /// (what is left stays in `tx`, copied, for the next call). Either way
    /// the batch being built is empty afterwards.
    pub fn send_batch(&self, tx: &mut TxBatch) -> bool {
        while let Some(&(start, len, to, seg)) = tx.pending.front() {
            let bytes = &tx.pending_buf[start..start + len];
            let r = if seg == 0 {
                self.send_datagram(bytes, to)
            } else {
                let iov = [libc::iovec {
                    iov_base: bytes.as_ptr() as *mut libc::c_void,
                    iov_len: len,
                }];
                self.sendmsg_gso(&iov, to, seg)
            };
            match r {
                Ok(false) => {
                    tx.stash();
                    tx.reset();
                    return false;
                }
                Ok(true) => {}
                Err(e) => crate::debug!(crate::ffi::FI_LOG_EP_DATA, "sendmsg {}: {}", to, e),
            }
            tx.pending.pop_front();
        }
        tx.pending_buf.clear();
        let Some(to) = tx.to else {
            return true;
        };
        let r = match tx.single() {
            Some(bytes) => self.send_datagram(bytes, to),
            None => self.sendmsg_gso(&tx.iov, to, tx.gso_size()),
        };
        let sent = match r {
            Ok(sent) => sent,
            Err(e) => {
                crate::debug!(crate::ffi::FI_LOG_EP_DATA, "sendmsg {}: {}", to, e);
                true
            }
        };
        if !sent {
            tx.stash();
        }
        tx.reset();
        sent
    }

    /// Sends the datagram built in `tx`'s current slot, `len` bytes to
    /// `to`, at once and on its own (a latency-bound send needs no batch).
    /// If the socket buffer is full it is kept, copied, for the next
    /// `send_batch`. Only while no batch is being built or waiting.
    pub fn send_slot(&self, tx: &mut TxBatch, to: SocketAddr, len: usize) {
        debug_assert!(!tx.building() && !tx.stalled());
        let slot = &tx.arena[tx.used..tx.used + len];
        match self.send_datagram(slot, to) {
            Ok(true) => {}
            Ok(false) => {
                let start = tx.pending_buf.len();
                tx.pending_buf.extend_from_slice(slot);
                tx.pending.push_back((start, len, to, 0));
            }
            Err(e) => crate::debug!(crate::ffi::FI_LOG_EP_DATA, "sendmsg {}: {}", to, e),
        }
    }

    /// One sendmsg of the gathered `iov` to `to`, cut into `seg`-byte
    /// datagrams by the kernel if `seg` is nonzero. Ok(false) when the
    /// socket buffer is full. A kernel, device or route that refuses
    /// UDP_SEGMENT turns it off for this endpoint's sockets; that batch is
    /// lost to the reliability layer, which resends it.
    ///
    /// libc, not rustix: rustix's sendmsg cannot carry the UDP_SEGMENT
    /// control message (not among its ancillary types), and takes
    /// `IoSlice`s, while the gathered run is held as raw iovecs into user
    /// buffers under `TxBatch::push`'s contract.
    fn sendmsg_gso(&self, iov: &[libc::iovec], to: SocketAddr, seg: usize) -> io::Result<bool> {
        let (fd, connected) = self.sock_for(to);
        self.send_calls.set(self.send_calls.get() + 1);
        // A connected socket sends without naming the destination.
        let name = (!connected).then(|| sockaddr_of(to));
        let (name_ptr, namelen) = match &name {
            Some((n, len)) => (n as *const libc::sockaddr_storage, *len),
            None => (std::ptr::null(), 0),
        };
        let mut ctrl = [0u64; CMSG_SPACE / 8];
        // SAFETY: msghdr is plain data; zero is a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = name_ptr as *mut libc::c_void;
        msg.msg_namelen = namelen;
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = iov.len() as _;
        if seg > 0 {
            msg.msg_control = ctrl.as_mut_ptr() as *mut libc::c_void;
            // SAFETY: CMSG_SPACE only computes a size.
            msg.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as _;
            // SAFETY: msg_control points at `ctrl`, 8-aligned and larger
            // than CMSG_SPACE(2), so the first header and its 2-byte data fit.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(2) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, seg as u16);
            }
        }
        // SAFETY: msg points at the address (or none, connected), the
        // control buffer and the caller's iovecs, which describe readable
        // memory for the whole call (TxBatch's contract); the kernel only
        // reads them; the borrow keeps `fd` open.
        let send = || match unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_DONTWAIT) } {
            r if r >= 0 => Ok(()),
            // (errno read at once: reading the error queue sets it.)
            _ => Err(io::Error::last_os_error()),
        };
        let Err(e) = self.once_more_after_news(fd, send) else {
            return Ok(true);
        };
        if e.kind() == io::ErrorKind::WouldBlock {
            return Ok(false);
        }
        // EMSGSIZE: segments larger than the route's MTU, which the kernel
        // does not segment (FI_GNIX_UDP_MTU above the link's); sent one by
        // one, IP fragments them.
        if seg > 0
            && matches!(
                e.raw_os_error(),
                Some(libc::EIO) | Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(libc::EMSGSIZE)
            )
            && self.gso.replace(false)
        {
            crate::warn!(
                crate::ffi::FI_LOG_EP_DATA,
                "sending {}-byte segments to {} as one GSO run failed ({}): one datagram a call from now on",
                seg,
                to,
                e
            );
        }
        Err(e)
    }

    /// After a receive of `n` slots into `batch`: turns GRO on (for good)
    /// once a datagram of bulk data arrives (`GRO_SEG_MIN` bytes or more:
    /// a segment of a message longer than a datagram, which its sender
    /// sends as one GSO run with the rest). A run then reaches us as one
    /// datagram rather than one per segment, which the kernel would cut
    /// out of the run and we would read one by one: a 16 KiB ping-pong
    /// across a veth pair took 15-20 µs one-way without and 9-10 with;
    /// fabtests' 2 and 4 KiB ones (two and three segments) 9-10 and 11-21
    /// µs without, 8-9 and 8-10 with, where GRO waited for four such
    /// datagrams in one receive and never came. Until then single
    /// datagrams are read with recvfrom, ~0.25 µs cheaper than the recvmsg
    /// GRO needs. Small datagrams (a collective's messages and ACKs from
    /// several peers, handshakes) do not count, however many: GRO
    /// coalesces nothing of them, and with it on every later receive,
    /// each small message's included, would pay for recvmsg.
    pub fn tune_gro(&self, batch: &RecvBatch, n: usize) {
        if self.gro_capable
            && !self.gro.get()
            && batch.has_bulk_datagram(n, GRO_SEG_MIN.min(self.max_datagram * 3 / 4))
            && set_udp_gro(self.fd())
        {
            // All or none: recv_one picks recvfrom or recvmsg for all.
            for c in &self.connected {
                set_udp_gro(c.sock.as_fd());
            }
            self.gro.set(true);
        }
    }

    #[cfg(test)]
    fn force_gro(&self) {
        assert!(set_udp_gro(self.fd()));
        self.gro.set(true);
    }

    pub fn gso(&self) -> bool {
        self.gso.get()
    }
}

/// Bytes from which a datagram counts as a segment of bulk data: a full
/// one on any IP path (IPv6 guarantees an MTU of 1280), more than a 1 KiB
/// message with its headers; three quarters of a full one where
/// FI_GNIX_UDP_MTU makes them shorter.
const GRO_SEG_MIN: usize = 1200;

/// Storage for one `recvmmsg`: buffers big enough for any datagram.
pub struct RecvBatch {
    slots: usize,
    bufs: Vec<Vec<u8>>,
    iov: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    hdrs: Vec<libc::mmsghdr>,
    ctrl: Vec<[u64; CMSG_SPACE / 8]>,
    /// Per slot: size of the datagrams the kernel coalesced into it (GRO), or 0.
    gso: Vec<usize>,
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
            ctrl: vec![[0; CMSG_SPACE / 8]; slots],
            gso: vec![0; slots],
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

    /// How many slots the last receive filled.
    pub fn filled(&self) -> usize {
        self.filled
    }

    /// Slot `i` of the last receive, its sender, and the size of the
    /// datagrams in it: one datagram, or several of that size (the last
    /// may be shorter) that the kernel coalesced.
    #[inline]
    pub fn get(&self, i: usize) -> Option<(&[u8], SocketAddr, usize)> {
        if i >= self.filled {
            return None;
        }
        // (With `one` set the batch holds one slot: i is 0.)
        let (bytes, from) = match self.one {
            Some((n, from)) => (&self.bufs[0][..n], from),
            None => {
                let len = self.hdrs[i].msg_len as usize;
                // SAFETY: the kernel wrote a sockaddr of msg_namelen bytes into names[i].
                let from = unsafe {
                    crate::getinfo::sockaddr_to_std(
                        &self.names[i] as *const libc::sockaddr_storage as *const u8,
                        self.hdrs[i].msg_hdr.msg_namelen as usize,
                    )
                }?;
                (&self.bufs[i][..len.min(self.bufs[i].len())], from)
            }
        };
        let seg = if self.gso[i] > 0 {
            self.gso[i]
        } else {
            bytes.len().max(1)
        };
        Some((bytes, from, seg))
    }

    /// Whether one of the first `n` slots of the last `recv_batch` holds
    /// a datagram of bulk data (`seg_min` bytes or more).
    fn has_bulk_datagram(&self, n: usize, seg_min: usize) -> bool {
        self.hdrs[..n.min(self.filled)]
            .iter()
            .any(|h| h.msg_len as usize >= seg_min)
    }

    /// Whether the last `recv_split` datagram was several coalesced ones.
    pub fn split_coalesced(&self) -> bool {
        self.gso[0] > 0 && self.gso[0] < self.split.0
    }
}

/// Datagrams on their way to the socket: runs of equal-sized datagrams to
/// one peer are gathered (headers here, payloads where they live) into one
/// GSO send. Also holds, copied, what the socket had no room for.
pub struct TxBatch {
    /// Headers, and whole datagrams whose payload had to be copied.
    arena: Vec<u8>,
    used: usize,
    iov: Vec<libc::iovec>,
    /// Where the batch being built starts in `arena`.
    start: usize,
    to: Option<SocketAddr>,
    seg: usize,
    count: usize,
    total: usize,
    /// The last datagram was shorter than `seg`: nothing may follow it.
    closed: bool,
    pending_buf: Vec<u8>,
    /// (start in pending_buf, length, destination, GSO size or 0)
    pending: std::collections::VecDeque<(usize, usize, SocketAddr, usize)>,
}

// SAFETY: the iovecs point into the batch's own arena or at payloads the
// caller promised stay valid until the batch is sent; they are only used by
// the thread that holds the endpoint (and so the batch).
unsafe impl Send for TxBatch {}

/// Space a slot must offer: the largest datagram any VC may build.
const SLOT: usize = 65_536;

impl Default for TxBatch {
    fn default() -> Self {
        TxBatch {
            arena: vec![0; 2 * SLOT],
            used: 0,
            iov: Vec::with_capacity(2 * GSO_MAX_SEGS),
            start: 0,
            to: None,
            seg: 0,
            count: 0,
            total: 0,
            closed: false,
            pending_buf: Vec::new(),
            pending: Default::default(),
        }
    }
}

impl TxBatch {
    /// Whether datagrams the socket refused are waiting.
    pub fn stalled(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether a batch is being built (not sent yet).
    pub fn building(&self) -> bool {
        self.to.is_some()
    }

    /// Whether the batch has no room for another slot (send it, then `rewind`).
    pub fn full(&self) -> bool {
        self.used + SLOT > self.arena.len()
    }

    /// Reuses the arena from the start; only once the batch is empty
    /// (sent or stashed), and not between `slot` and `push`.
    pub fn rewind(&mut self) {
        debug_assert!(self.to.is_none());
        if self.to.is_none() {
            self.used = 0;
        }
    }

    /// Where the next datagram is built (at least 64 KiB).
    pub fn slot(&mut self) -> &mut [u8] {
        &mut self.arena[self.used..self.used + SLOT]
    }

    /// Whether a datagram of `len` bytes to `to` can join the batch.
    pub fn fits(&self, to: SocketAddr, len: usize, gso: bool) -> bool {
        self.to.is_none()
            || (gso
                && self.to == Some(to)
                && !self.closed
                && len <= self.seg
                && self.count < GSO_MAX_SEGS
                && self.total + len <= GSO_MAX_BYTES)
    }

    /// Adds the datagram built in the current slot: its first `hdr_len`
    /// bytes there, then `payload` (empty if the slot holds it all).
    /// Call `fits` first.
    ///
    /// # Safety
    /// `payload` must stay valid and unchanged until the batch is sent or
    /// stashed (`UdpSockets::send_batch`).
    pub unsafe fn push(&mut self, to: SocketAddr, hdr_len: usize, payload: &[u8]) {
        let len = hdr_len + payload.len();
        if self.to.is_none() {
            self.to = Some(to);
            self.start = self.used;
            self.seg = len;
        } else if len < self.seg {
            self.closed = true;
        }
        self.iov.push(libc::iovec {
            iov_base: self.arena[self.used..].as_mut_ptr() as *mut libc::c_void,
            iov_len: hdr_len,
        });
        if !payload.is_empty() {
            self.iov.push(libc::iovec {
                iov_base: payload.as_ptr() as *mut libc::c_void,
                iov_len: payload.len(),
            });
        }
        self.used += hdr_len;
        self.count += 1;
        self.total += len;
    }

    /// Copies the batch into the pending queue (the socket refused it).
    fn stash(&mut self) {
        let Some(to) = self.to else { return };
        let start = self.pending_buf.len();
        for v in &self.iov {
            // SAFETY: every iovec points at arena bytes or at a payload
            // the caller keeps valid until the batch is sent or stashed (push).
            let b = unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len) };
            self.pending_buf.extend_from_slice(b);
        }
        self.pending.push_back((start, self.total, to, self.gso_size()));
    }

    /// The batch as one contiguous datagram, if it is one whose bytes are
    /// all in the arena (a lone datagram with no separate payload).
    fn single(&self) -> Option<&[u8]> {
        (self.count == 1 && self.iov.len() == 1).then(|| &self.arena[self.start..self.used])
    }

    /// The UDP_SEGMENT size the batch goes out with: 0 for a lone datagram.
    fn gso_size(&self) -> usize {
        if self.count > 1 {
            self.seg
        } else {
            0
        }
    }

    fn reset(&mut self) {
        self.iov.clear();
        self.to = None;
        self.count = 0;
        self.total = 0;
        self.closed = false;
    }
}
mod errqueue;
mod sys;
#[cfg(test)]
mod tests;
