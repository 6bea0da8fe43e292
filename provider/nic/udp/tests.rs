//! The udp wire's sockets against real ones on loopback.

use super::*;

fn wait_readable(w: &UdpSockets) {
    use rustix::event::{PollFd, PollFlags};
    w.watch().unwrap();
    let t = rustix::time::Timespec { tv_sec: 5, tv_nsec: 0 };
    let r = rustix::event::poll(&mut [PollFd::new(&w.epoll, PollFlags::IN)], Some(&t));
    assert_eq!(r, Ok(1), "nothing arrived");
}

/// `count` datagrams of `len` bytes from `a` to `b`, then one receive
/// of what `b` holds (all of them: they are on loopback when the send
/// returns). How many the receive brought.
fn send_and_receive(a: &UdpSockets, b: &UdpSockets, count: usize, len: usize, rx: &mut RecvBatch) -> usize {
    for i in 0..count {
        a.sock.send_to(&vec![i as u8; len], b.local_addr()).unwrap();
    }
    wait_readable(b);
    b.recv_batch(rx).unwrap()
}

/// GRO goes on for good once a datagram of bulk data arrives (a segment
/// of a message of several), not for small ones, however many.
#[test]
fn gro_goes_on_once_a_segment_of_bulk_data_arrives() {
    let (a, mut b) = (bind_lo(0), bind_lo(0));
    // Loopback never coalesces; the rule is the same on any address.
    b.gro_capable = true;
    let mut rx = RecvBatch::new(16);
    let n = send_and_receive(&a, &b, 8, 68, &mut rx);
    assert_eq!(n, 8);
    b.tune_gro(&rx, n);
    assert!(!b.gro.get(), "eight small datagrams at once are no bulk data");
    let n = send_and_receive(&a, &b, 1, GRO_SEG_MIN - 1, &mut rx);
    assert_eq!(n, 1);
    b.tune_gro(&rx, n);
    assert!(!b.gro.get(), "shorter than a segment of bulk data");
    let n = send_and_receive(&a, &b, 1, GRO_SEG_MIN, &mut rx);
    assert_eq!(n, 1);
    b.tune_gro(&rx, n);
    assert!(b.gro.get());
    let n = send_and_receive(&a, &b, 1, 68, &mut rx);
    b.tune_gro(&rx, n);
    assert!(b.gro.get(), "for good");
}

/// A run of equal-sized datagrams (the last shorter) leaves as one GSO
/// send, arrives coalesced at a socket with GRO, and is cut back into
/// exactly the datagrams sent, in order.
#[test]
fn gso_run_arrives_as_the_datagrams_sent() {
    let (a, b) = (bind_lo(0), bind_lo(0));
    b.force_gro();
    let to = b.local_addr();
    let sizes: Vec<usize> = (0..10).map(|i| if i == 9 { 500 } else { 1000 }).collect();
    let mut tx = TxBatch::default();
    for (i, &n) in sizes.iter().enumerate() {
        let slot = tx.slot();
        for (j, byte) in slot[..n].iter_mut().enumerate() {
            *byte = (i * 31 + j) as u8;
        }
        assert!(tx.fits(to, n, a.gso()));
        // SAFETY: no separate payload; the slot holds the whole datagram.
        unsafe { tx.push(to, n, &[]) };
    }
    assert!(a.send_batch(&mut tx));
    assert!(!tx.building() && !tx.stalled());

    let mut rx = RecvBatch::new(4);
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut coalesced = false;
    while got.len() < sizes.len() {
        wait_readable(&b);
        let n = b.recv_batch(&mut rx).unwrap();
        for i in 0..n {
            let (bytes, from, seg) = rx.get(i).unwrap();
            assert_eq!(from, a.local_addr());
            coalesced |= seg < bytes.len();
            got.extend(bytes.chunks(seg).map(<[u8]>::to_vec));
        }
    }
    assert!(coalesced, "the run was not received coalesced (no GSO/GRO?)");
    assert_eq!(got.len(), sizes.len());
    for (i, d) in got.iter().enumerate() {
        assert_eq!(d.len(), sizes[i], "datagram {i}");
        assert!(
            d.iter().enumerate().all(|(j, &x)| x == (i * 31 + j) as u8),
            "datagram {i}"
        );
    }
}

/// recv_one (the polling path) also cuts up a coalesced run.
#[test]
fn recv_one_cuts_up_a_coalesced_run() {
    let (a, b) = (bind_lo(0), bind_lo(0));
    b.force_gro();
    let mut tx = TxBatch::default();
    for i in 0..8u8 {
        tx.slot()[..700].fill(i);
        // SAFETY: no separate payload; the slot holds the whole datagram.
        unsafe { tx.push(b.local_addr(), 700, &[]) };
    }
    assert!(a.send_batch(&mut tx));
    let mut rx = RecvBatch::new(2);
    let mut got = Vec::new();
    while got.len() < 8 {
        wait_readable(&b);
        assert!(b.recv_one(&mut rx).unwrap());
        let (bytes, _, seg) = rx.get(0).unwrap();
        got.extend(bytes.chunks(seg).map(|d| (d.len(), d[0])));
    }
    assert_eq!(got, (0..8u8).map(|i| (700, i)).collect::<Vec<_>>());
    assert!(!b.recv_one(&mut rx).unwrap());
}

/// A datagram of another size or to another peer closes the run.
#[test]
fn runs_break_on_size_and_peer() {
    let mut tx = TxBatch::default();
    let p: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let q: SocketAddr = "127.0.0.1:10".parse().unwrap();
    assert!(tx.fits(p, 100, true));
    // SAFETY: no separate payload.
    unsafe { tx.push(p, 100, &[]) };
    assert!(tx.fits(p, 100, true));
    assert!(!tx.fits(q, 100, true));
    assert!(!tx.fits(p, 101, true));
    assert!(!tx.fits(p, 100, false));
    assert!(tx.fits(p, 60, true));
    // SAFETY: as above.
    unsafe { tx.push(p, 60, &[]) };
    assert!(!tx.fits(p, 60, true), "nothing follows a short datagram");
}

fn send_to(w: &UdpSockets, bytes: &[u8], to: SocketAddr) {
    let mut tx = TxBatch::default();
    tx.slot()[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: no separate payload; the slot holds the whole datagram.
    unsafe { tx.push(to, bytes.len(), &[]) };
    assert!(w.send_batch(&mut tx));
}

/// Polls until a datagram arrives (bounded by wait_readable's timeout):
/// its first byte and sender.
fn recv(w: &UdpSockets, rx: &mut RecvBatch) -> (u8, SocketAddr) {
    for _ in 0..4 * MAIN_POLL_EVERY {
        if w.recv_one(rx).unwrap() {
            let (b, from, _) = rx.get(0).unwrap();
            return (b[0], from);
        }
        wait_readable(w);
    }
    panic!("nothing received");
}

fn bind_lo(connect: usize) -> UdpSockets {
    UdpSockets::bind("127.0.0.1:0".parse().unwrap(), "lo", 1 << 20, 0, connect).unwrap()
}

/// A peer's datagrams land on its connected socket, others' on the main
/// one; both are received, with their true senders, and our datagrams
/// to the connected peer carry the endpoint's address.
#[test]
fn connected_socket_serves_its_peer_and_main_the_rest() {
    let mut a = bind_lo(4);
    let b = bind_lo(0);
    let c = bind_lo(0);
    a.connect(b.local_addr()).unwrap();
    assert!(a.is_connected(b.local_addr()));
    a.set_peer_count(2);
    let mut rx = RecvBatch::new(2);
    send_to(&b, &[1], a.local_addr());
    send_to(&c, &[2], a.local_addr());
    let mut got = [recv(&a, &mut rx), recv(&a, &mut rx)];
    got.sort();
    assert_eq!(got, [(1, b.local_addr()), (2, c.local_addr())]);
    send_to(&a, &[3], b.local_addr());
    assert_eq!(recv(&b, &mut rx), (3, a.local_addr()));
    // The kernel delivered b's datagram to the connected socket.
    send_to(&b, &[4], a.local_addr());
    wait_readable(&a);
    assert_eq!(
        recv_from(&a.connected[0].sock, &mut [0u8; 8]).unwrap().map(|r| r.1),
        Some(b.local_addr())
    );
}

/// A connected socket is read with the sender's address until it is
/// found empty once (what was queued before its connect may be anyone's),
/// and then without: its datagrams are its peer's, still reported as
/// such, and the main socket's others' with their own senders.
#[test]
fn a_connected_socket_found_empty_is_read_without_the_address() {
    let mut a = bind_lo(4);
    let b = bind_lo(0);
    let c = bind_lo(0);
    a.connect(b.local_addr()).unwrap();
    a.set_peer_count(2);
    let mut rx = RecvBatch::new(2);
    send_to(&b, &[1], a.local_addr());
    assert_eq!(recv(&a, &mut rx), (1, b.local_addr()));
    assert!(!a.connected[0].only_peer.get(), "not found empty yet");
    assert!(!a.recv_one(&mut rx).unwrap());
    assert!(a.connected[0].only_peer.get());
    for k in 0..3u8 {
        send_to(&b, &[10 + k], a.local_addr());
        send_to(&c, &[20 + k], a.local_addr());
        let mut got = [recv(&a, &mut rx), recv(&a, &mut rx)];
        got.sort();
        assert_eq!(got, [(10 + k, b.local_addr()), (20 + k, c.local_addr())]);
    }
}

/// With the main socket polled rarely a new peer still gets through,
/// within MAIN_POLL_EVERY polls; with more sockets than are polled
/// directly, epoll finds which one has data.
#[test]
fn main_socket_and_many_connected_sockets_are_all_polled() {
    let mut a = bind_lo(8);
    let peers: Vec<UdpSockets> = (0..4).map(|_| bind_lo(0)).collect();
    a.connect(peers[0].local_addr()).unwrap();
    a.set_peer_count(1);
    let mut rx = RecvBatch::new(2);
    send_to(&peers[1], &[9], a.local_addr());
    assert_eq!(recv(&a, &mut rx), (9, peers[1].local_addr()));
    for p in &peers[1..] {
        a.connect(p.local_addr()).unwrap();
    }
    assert_eq!(a.connected_count(), 4);
    for (i, p) in peers.iter().enumerate().rev() {
        send_to(p, &[i as u8], a.local_addr());
    }
    let mut got: Vec<_> = (0..4).map(|_| recv(&a, &mut rx)).collect();
    got.sort();
    let want: Vec<_> = peers
        .iter()
        .enumerate()
        .map(|(i, p)| (i as u8, p.local_addr()))
        .collect();
    assert_eq!(got, want);
    a.disconnect(peers[2].local_addr());
    assert_eq!(a.connected_count(), 3);
    send_to(&peers[2], &[7], a.local_addr());
    assert_eq!(recv(&a, &mut rx), (7, peers[2].local_addr()));
}

/// A connected peer that went away (ICMP port unreachable, reported as
/// ECONNREFUSED on its socket) does not stop the others' datagrams.
#[test]
fn refused_connected_peer_does_not_block_the_others() {
    let mut a = bind_lo(4);
    let gone = bind_lo(0).local_addr();
    let c = bind_lo(0);
    a.connect(gone).unwrap();
    send_to(&a, &[1], gone);
    send_to(&c, &[5], a.local_addr());
    let mut rx = RecvBatch::new(2);
    let mut got = None;
    for _ in 0..100 {
        match a.recv_one(&mut rx) {
            Ok(true) => {
                let (b, from, _) = rx.get(0).unwrap();
                got = Some((b[0], from));
                break;
            }
            Ok(false) | Err(_) => wait_readable(&a),
        }
    }
    assert_eq!(got, Some((5, c.local_addr())));
}

/// SO_REUSEPORT on the main socket does not open its port to other
/// endpoints: a socket that did not set it before binding cannot join.
#[test]
fn port_stays_ours() {
    let a = bind_lo(4);
    assert!(std::net::UdpSocket::bind(a.local_addr()).is_err());
}

/// A datagram to a port nobody holds draws an ICMP port unreachable. The
/// socket that sent it, main or connected, reports it at the next call
/// (here a receive that finds nothing), which reads it off the error
/// queue: a refusal naming the destination, with the datagram's first
/// bytes. Then the sockets are quiet again: EPOLLERR does not stay up to
/// wake a sleeper over and over.
#[test]
fn a_closed_port_is_reported_with_the_quote_and_then_quiet() {
    use rustix::event::{PollFd, PollFlags};
    for connected in [false, true] {
        let mut a = bind_lo(4);
        let gone = bind_lo(0).local_addr();
        if connected {
            a.connect(gone).unwrap();
        }
        let bytes: Vec<u8> = (0..40u8).collect();
        send_to(&a, &bytes, gone);
        // The ICMP message is the only thing that can wake this.
        wait_readable(&a);
        let mut rx = RecvBatch::new(2);
        assert!(!a.recv_one(&mut rx).unwrap(), "connected: {connected}");
        assert!(a.has_news());
        let news = a.take_news();
        assert_eq!(news.len(), 1, "connected: {connected}");
        assert!(matches!(news[0], KernelNews::Refused { to, .. } if to == gone));
        assert_eq!(news[0].quote(), &bytes[..errqueue::QUOTE_LEN]);
        assert!(!a.has_news());
        let zero = rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 };
        let r = rustix::event::poll(&mut [PollFd::new(&a.epoll, PollFlags::IN)], Some(&zero));
        assert_eq!(r, Ok(0), "connected: {connected}: still reported");
    }
}

/// The error an ICMP message leaves pending on the main socket fails the
/// next call on it, whichever peer that call is for: a send to a live
/// peer right after another peer's refusal is made again once the news
/// is read, and arrives.
#[test]
fn a_send_after_another_peers_refusal_still_goes_out() {
    let a = bind_lo(0);
    let gone = bind_lo(0).local_addr();
    let c = bind_lo(0);
    send_to(&a, &[1], gone);
    wait_readable(&a);
    send_to(&a, &[9], c.local_addr());
    wait_readable(&c);
    let mut rx = RecvBatch::new(2);
    assert!(c.recv_one(&mut rx).unwrap());
    let (b, from, _) = rx.get(0).unwrap();
    assert_eq!((b[0], from), (9, a.local_addr()));
    let news = a.take_news();
    assert!(matches!(news[..], [KernelNews::Refused { to, .. }] if to == gone));
}

/// Whether the epoll set reports something to read, without waiting.
fn set_readable(w: &UdpSockets) -> bool {
    use rustix::event::{PollFd, PollFlags};
    let t = rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 };
    rustix::event::poll(&mut [PollFd::new(&w.epoll, PollFlags::IN)], Some(&t)) == Ok(1)
}

/// Out of the epoll set the sockets wake nobody; back in it, what came
/// meanwhile is reported at once (a sleeper that watches, then sleeps,
/// loses nothing). With more sockets than are polled directly the set
/// is how they are polled: they stay.
#[test]
fn unwatched_sockets_wake_nobody_and_watching_again_reports_what_came() {
    let mut a = bind_lo(4);
    let b = bind_lo(0);
    a.connect(b.local_addr()).unwrap();
    a.set_peer_count(1);
    let mut rx = RecvBatch::new(2);
    a.watch().unwrap();
    send_to(&b, &[1], a.local_addr());
    assert!(set_readable(&a), "a watched socket wakes the set");
    assert_eq!(recv(&a, &mut rx), (1, b.local_addr()));
    a.unwatch();
    assert!(!a.watched());
    send_to(&b, &[2], a.local_addr());
    assert!(!set_readable(&a), "an unwatched socket wakes nobody");
    a.watch().unwrap();
    assert!(set_readable(&a), "watching again reports the datagram that came");
    assert_eq!(recv(&a, &mut rx), (2, b.local_addr()));
    // Three sockets: recv_any asks the set which has data.
    let peers: Vec<UdpSockets> = (0..2).map(|_| bind_lo(0)).collect();
    for p in &peers {
        a.connect(p.local_addr()).unwrap();
    }
    a.unwatch();
    assert!(a.watched(), "the set polls the sockets: they stay in it");
    send_to(&peers[1], &[3], a.local_addr());
    assert_eq!(recv(&a, &mut rx), (3, peers[1].local_addr()));
}
