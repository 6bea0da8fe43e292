//! Which destinations a small send can put straight into a local peer's
//! ring (`Ep::send_small`): per fi_addr, the shm wire's index of the peer
//! (`Exec::route_ref`'s answer), or that the peer is not reached over
//! shared memory. An AV index is a small number, so the table is a vector
//! indexed by it: a send finds its ring with one load, not by hashing or
//! comparing socket addresses.
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
/// Reached over UDP (or not in the AV): the general path's.
const NOT_SHM: u32 = u32::MAX - 1;
/// fi_addrs beyond this are left to the general path (the table would
/// grow without bound for an application that numbers its peers oddly).
const MAX_LANES: usize = 1 << 16;

#[derive(Default)]
pub(super) struct Lanes {
    av_gen: u64,
    routes_gen: u64,
    ix: Vec<u32>,
}

impl Lanes {
    /// The shm peer index of `dest`, if a small send to it may go straight
    /// into its ring. `av_gen` is the AV's generation now; `addr` looks
    /// `dest` up in it, on a miss.
    #[inline(always)]
    pub(super) fn lookup(
        &mut self,
        av_gen: u64,
        addr: impl FnOnce(u64) -> Option<SocketAddr>,
        shm: &mut ShmWire,
        dest: u64,
    ) -> Option<PeerIx> {
        let rg = shm.routes_gen();
        if av_gen != self.av_gen || rg != self.routes_gen {
            self.reset(av_gen, rg);
        }
        match usize::try_from(dest).ok().and_then(|d| self.ix.get(d)) {
            Some(&NOT_SHM) => None,
            Some(&UNKNOWN) | None => self.fill(addr, shm, dest),
            Some(&ix) => Some(ix as PeerIx),
        }
    }

    #[cold]
    fn reset(&mut self, av_gen: u64, routes_gen: u64) {
        self.av_gen = av_gen;
        self.routes_gen = routes_gen;
        self.ix.clear();
    }

    /// A miss: the AV and the wire's route decide, as for any send (the
    /// route may connect to the peer's mailbox, as the send's own would).
    #[cold]
    fn fill(&mut self, addr: impl FnOnce(u64) -> Option<SocketAddr>, shm: &mut ShmWire, dest: u64) -> Option<PeerIx> {
        let d = usize::try_from(dest).ok().filter(|&d| d < MAX_LANES)?;
        let addr = addr(dest)?;
        // (An index the table cannot hold is left to the general path.)
        let ix = shm.route_ref(&addr).filter(|&i| i < NOT_SHM as usize);
        if self.ix.len() <= d {
            self.ix.resize(d + 1, UNKNOWN);
        }
        self.ix[d] = ix.map_or(NOT_SHM, |i| i as u32);
        ix
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
        let look = |lanes: &mut Lanes, a: &mut ShmWire, gen: u64, dest: u64| {
            lanes.lookup(
                gen,
                |d| {
                    asked.set(asked.get() + 1);
                    (d == 0).then_some(b.me())
                },
                a,
                dest,
            )
        };
        let ix = look(&mut lanes, &mut a, 1, 0).expect("a local peer");
        assert_eq!(look(&mut lanes, &mut a, 1, 0), Some(ix));
        assert_eq!(look(&mut lanes, &mut a, 1, 5), None, "not in the AV");
        assert_eq!(look(&mut lanes, &mut a, 1, MAX_LANES as u64), None, "beyond the table");
        assert_eq!(look(&mut lanes, &mut a, 2, 0), Some(ix), "the AV changed: asked again");
        // One look per fi_addr and AV generation; none beyond the table.
        assert_eq!(asked.get(), 3);
    }

    #[test]
    fn a_peer_that_restarts_gets_a_new_lane() {
        let (mut a, mut b) = (wire(41310), wire(41311));
        let b_addr = b.me();
        let mut lanes = Lanes::default();
        let ix = lanes.lookup(1, |_| Some(b_addr), &mut a, 0).unwrap();
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
        let ix2 = lanes.lookup(1, |_| Some(b_addr), &mut a, 0).unwrap();
        assert!(send(&mut a, ix2, 4));
        assert_eq!(tags(&mut b2), [3, 4]);
    }
}
