//! Where a small send goes (`Ep::send_small`): per fi_addr, the shm
//! wire's index of the peer (`Exec::route_ref`'s answer), or the address
//! of a peer reached over UDP. An AV index is a small number, so the
//! table is a vector indexed by it: a send finds its ring, or its UDP
//! peer's address, with a load or two, not by hashing, comparing socket
//! addresses or taking the AV's lock (a rank that sends to its remote
//! peers in turn missed the endpoint's one-entry destination cache on
//! every send, and read the AV under its lock each time).
//!
//! The table stands for the AV and the wire's routes as they were when it
//! was filled: it is emptied when either changes (the AV's generation, the
//! wire's `routes_gen`), and refilled one destination at a time by the
//! sends that miss.
#![forbid(unsafe_code)]

use crate::nic::shm::PeerIx;
use crate::nic::shm::ShmWire;
use std::net::SocketAddr;

/// Not looked up yet.
const UNKNOWN: u32 = u32::MAX;
/// In the AV, reached over UDP: the entry's low bits index `Lanes::udp`.
const UDP: u32 = 1 << 31;
/// fi_addrs beyond this are left to the general path (the table would
/// grow without bound for an application that numbers its peers oddly).
const MAX_LANES: usize = 1 << 16;

/// The way of a small send to one fi_addr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lane<'a> {
    /// Into the ring of the shm wire's peer `PeerIx`.
    Shm(PeerIx),
    /// Over UDP to this address (a peer on another host, or one on this
    /// host without a mailbox, which stays UDP's: `Exec::route_ref`).
    Udp(&'a SocketAddr),
    /// The general path's: not in the AV, or beyond the table.
    General,
}

#[derive(Default)]
pub(super) struct Lanes {
    av_gen: u64,
    routes_gen: u64,
    ix: Vec<u32>,
    /// The addresses of the UDP peers in `ix`, in the order found.
    udp: Vec<SocketAddr>,
}

impl Lanes {
    /// The way of a small send to `dest`. `av_gen` is the AV's generation
    /// now; `addr` looks `dest` up in it, on a miss; without a shm wire
    /// every peer is UDP's.
    #[inline(always)]
    pub(super) fn lookup(
        &mut self,
        av_gen: u64,
        addr: impl FnOnce(u64) -> Option<SocketAddr>,
        shm: Option<&mut ShmWire>,
        dest: u64,
    ) -> Lane<'_> {
        let rg = shm.as_ref().map_or(0, |w| w.routes_gen());
        if av_gen != self.av_gen || rg != self.routes_gen {
            self.reset(av_gen, rg);
        }
        match usize::try_from(dest).ok().and_then(|d| self.ix.get(d)) {
            Some(&UNKNOWN) | None => self.fill(addr, shm, dest),
            Some(&ix) if ix & UDP != 0 => Lane::Udp(&self.udp[(ix & !UDP) as usize]),
            Some(&ix) => Lane::Shm(ix as PeerIx),
        }
    }

    #[cold]
    fn reset(&mut self, av_gen: u64, routes_gen: u64) {
        self.av_gen = av_gen;
        self.routes_gen = routes_gen;
        self.ix.clear();
        self.udp.clear();
    }

    /// A miss: the AV and the wire's route decide, as for any send (the
    /// route may connect to the peer's mailbox, as the send's own would).
    #[cold]
    fn fill(&mut self, addr: impl FnOnce(u64) -> Option<SocketAddr>, shm: Option<&mut ShmWire>, dest: u64) -> Lane<'_> {
        let Some(d) = usize::try_from(dest).ok().filter(|&d| d < MAX_LANES) else {
            return Lane::General;
        };
        let Some(addr) = addr(dest) else { return Lane::General };
        let ix = match shm.and_then(|w| w.route_ref(&addr)) {
            Some(i) if i < UDP as usize => i as u32,
            // (An index the table cannot hold is left to the general path.)
            Some(_) => return Lane::General,
            // At most one a slot of `ix` (MAX_LANES), so the index fits.
            None => {
                self.udp.push(addr);
                UDP | (self.udp.len() - 1) as u32
            }
        };
        if self.ix.len() <= d {
            self.ix.resize(d + 1, UNKNOWN);
        }
        self.ix[d] = ix;
        if ix & UDP != 0 {
            Lane::Udp(&self.udp[(ix & !UDP) as usize])
        } else {
            Lane::Shm(ix as PeerIx)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nic::shm::{test_addr, Geometry, ShmConfig};
    use crate::nic::wire::{Arrival, Body, SendFlags, Take, Upcall, Wire, WireEvent};
    use crate::proto::MsgHdr;

    fn wire(port: u16) -> ShmWire {
        let cfg = ShmConfig {
            geo: Geometry::new(2, 8, 256),
            cma: false,
            local_ips: vec![],
            loan: 0,
        };
        ShmWire::new(test_addr(port), cfg, port as u64).unwrap()
    }

    /// The tags of the messages a wire's progress hands up.
    #[derive(Default)]
    struct Tags(Vec<u64>);

    impl Upcall for Tags {
        fn arrived(&mut self, a: Arrival<'_>) -> Take {
            assert!(matches!(a.body, Body::Shared(_)), "an eager message in a slot");
            self.0.push(a.hdr.tag);
            Take::Done
        }
        fn event(&mut self, _e: WireEvent) {}
    }

    fn tags(w: &mut ShmWire) -> Vec<u64> {
        let mut t = Tags::default();
        for _ in 0..10 {
            w.progress(0, &mut t);
        }
        t.0
    }

    fn send(w: &mut ShmWire, ix: PeerIx, tag: u64) -> bool {
        let hdr = MsgHdr {
            tag,
            data: 0,
            len: 3,
            flags: MsgHdr::TAGGED,
        };
        w.send_to(ix, &hdr, SendFlags::default(), &vec![1u8, 2, 3])
    }

    #[test]
    fn a_lane_is_found_once_and_dropped_when_the_av_changes() {
        let (mut a, b) = (wire(41300), wire(41301));
        let mut lanes = Lanes::default();
        let asked = std::cell::Cell::new(0);
        // Some(ring) for a local peer, None for the general path.
        let look = |lanes: &mut Lanes, a: &mut ShmWire, gen: u64, dest: u64| {
            let lane = lanes.lookup(
                gen,
                |d| {
                    asked.set(asked.get() + 1);
                    (d == 0).then_some(b.me())
                },
                Some(a),
                dest,
            );
            match lane {
                Lane::Shm(ix) => Some(ix),
                Lane::General => None,
                Lane::Udp(to) => panic!("{to} is local"),
            }
        };
        let ix = look(&mut lanes, &mut a, 1, 0);
        assert!(ix.is_some(), "a local peer");
        assert_eq!(look(&mut lanes, &mut a, 1, 0), ix);
        assert_eq!(look(&mut lanes, &mut a, 1, 5), None, "not in the AV");
        assert_eq!(look(&mut lanes, &mut a, 1, MAX_LANES as u64), None, "beyond the table");
        assert_eq!(look(&mut lanes, &mut a, 2, 0), ix, "the AV changed: asked again");
        let ix = Lane::Shm(ix.unwrap());
        // A peer on another host is UDP's, as is every peer without a
        // shm wire.
        // The lane holds its address: the send needs no AV lookup.
        let far: SocketAddr = "192.0.2.1:7000".parse().unwrap();
        let other: SocketAddr = "192.0.2.2:7000".parse().unwrap();
        assert_eq!(lanes.lookup(2, |_| Some(far), Some(&mut a), 1), Lane::Udp(&far));
        assert_eq!(lanes.lookup(2, |_| Some(other), Some(&mut a), 3), Lane::Udp(&other));
        assert_eq!(lanes.lookup(2, |_| None, Some(&mut a), 1), Lane::Udp(&far), "kept");
        assert_eq!(lanes.lookup(2, |_| None, Some(&mut a), 3), Lane::Udp(&other), "kept");
        assert_eq!(lanes.lookup(2, |_| None, Some(&mut a), 0), ix, "kept");
        // A new generation forgets the addresses with the rest.
        assert_eq!(lanes.lookup(3, |_| Some(other), Some(&mut a), 1), Lane::Udp(&other));
        let mut none = Lanes::default();
        let me = b.me();
        assert_eq!(none.lookup(1, |_| Some(me), None, 0), Lane::Udp(&me));
        // One look per fi_addr and AV generation; none beyond the table.
        assert_eq!(asked.get(), 3);
    }

    #[test]
    fn a_peer_that_restarts_gets_a_new_lane() {
        let (mut a, mut b) = (wire(41310), wire(41311));
        let b_addr = b.me();
        let mut lanes = Lanes::default();
        let Lane::Shm(ix) = lanes.lookup(1, |_| Some(b_addr), Some(&mut a), 0) else {
            panic!("a local peer")
        };
        assert!(send(&mut a, ix, 1));
        assert_eq!(tags(&mut b), [1]);
        // B goes away; a new endpoint takes its address (a new mailbox).
        drop(b);
        let mut b2 = wire(41311);
        assert!(!send(&mut a, ix, 2), "the closed owner's ring takes nothing");
        // The general path's route notices the closed owner and connects
        // to the new mailbox; the lane table follows.
        let hdr = MsgHdr {
            tag: 3,
            data: 0,
            len: 1,
            flags: MsgHdr::TAGGED,
        };
        assert!(a.send_now(&b_addr, &hdr, SendFlags::default(), &vec![9u8]));
        let Lane::Shm(ix2) = lanes.lookup(1, |_| Some(b_addr), Some(&mut a), 0) else {
            panic!("the new mailbox")
        };
        assert!(send(&mut a, ix2, 4));
        assert_eq!(tags(&mut b2), [3, 4]);
    }
}
