//! When the engine's next timer is due, without walking every VC.
//!
//! With more than `WALK_MAX` VCs, each VC's earliest deadline
//! (`Vc::next_deadline`) sits in a min-heap, entered again whenever a
//! change moves it (`Timers::rearm`, called by the engine's entry points
//! on the VCs they changed). An entry is live while its VC's `armed`
//! still says its time; the ones a later change left behind are dropped
//! as they reach the top. A change that may touch many VCs at once (a
//! handshake, the credit bank's epoch, closing) asks for all of them to
//! be looked at again (`rearm_all`), as does a heap grown to twice the
//! VCs. With few VCs a walk of them all is cheaper than keeping the heap
//! (each rearm works out a deadline and pushes it; a message makes
//! several): then a change only forgets the answer, and the next ask
//! walks.
//!
//! Why: `poll_timeout` is asked on every pass and `handle_timeout` runs
//! whenever any timer is due. Walking every VC for them cost each message
//! of a rank with many peers a visit to every other peer's VC (several
//! cache lines each), and each delayed ACK a walk of them all.

use super::vc::Vc;
use super::Map;
use crate::proto::EngineConfig;
use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;

/// A heap larger than this many entries per VC (plus a few) is rebuilt.
const STALE_PER_VC: usize = 2;
/// Up to this many VCs `next` walks them rather than keep the heap.
const WALK_MAX: usize = 8;

#[derive(Default)]
pub(super) struct Timers {
    /// (deadline, VC): live while `vcs[VC].armed == Some(deadline)`.
    heap: RefCell<BinaryHeap<Reverse<(u64, SocketAddr)>>>,
    /// Every VC's deadline is to be worked out again.
    all: Cell<bool>,
    /// `next`'s answer while no VC's deadline moved (None: not known): a
    /// polling caller asks on every pass, most of which change nothing.
    top: Cell<Option<Option<u64>>>,
    /// The heap is kept (more than `WALK_MAX` VCs at the last `next`).
    kept: Cell<bool>,
}

impl Timers {
    /// `vc` may have changed: its deadline goes in again if it moved.
    /// (Inline: with few VCs, on every message's way, it only forgets.)
    #[inline(always)]
    pub(super) fn rearm(&self, vc: &Vc, cfg: &EngineConfig) {
        if self.kept.get() {
            self.rearm_kept(vc, cfg);
        } else {
            self.top.set(None);
        }
    }

    #[inline(never)]
    fn rearm_kept(&self, vc: &Vc, cfg: &EngineConfig) {
        let d = vc.next_deadline(cfg);
        if d != vc.armed.get() {
            vc.armed.set(d);
            self.top.set(None);
            if let Some(t) = d {
                self.heap.borrow_mut().push(Reverse((t, vc.peer)));
            }
        }
    }

    /// Any VC may have changed.
    pub(super) fn rearm_all(&self) {
        self.all.set(true);
        self.top.set(None);
    }

    /// The earliest deadline of any VC of `vcs`.
    #[inline]
    pub(super) fn next(&self, vcs: &Map<SocketAddr, Vc>, cfg: &EngineConfig) -> Option<u64> {
        if let Some(t) = self.top.get() {
            return t;
        }
        let t = self.settle(vcs, cfg);
        self.top.set(Some(t));
        t
    }

    /// `next` worked out: a walk of few VCs (inline, as every message of
    /// a ping-pong asks once); or the heap's answer.
    #[inline]
    fn settle(&self, vcs: &Map<SocketAddr, Vc>, cfg: &EngineConfig) -> Option<u64> {
        if vcs.len() <= WALK_MAX {
            // (Rearms meanwhile only forget the answer.)
            self.all.set(false);
            if self.kept.replace(false) {
                self.heap.borrow_mut().clear();
            }
            return vcs.values().filter_map(|vc| vc.next_deadline(cfg)).min();
        }
        self.settle_kept(vcs, cfg)
    }

    /// `settle` with the heap: a rebuild if one is due, then the top's
    /// stale entries dropped.
    #[inline(never)]
    fn settle_kept(&self, vcs: &Map<SocketAddr, Vc>, cfg: &EngineConfig) -> Option<u64> {
        let mut heap = self.heap.borrow_mut();
        if !self.kept.replace(true) || self.all.replace(false) || heap.len() > STALE_PER_VC * vcs.len() + 16 {
            heap.clear();
            for vc in vcs.values() {
                let d = vc.next_deadline(cfg);
                vc.armed.set(d);
                if let Some(t) = d {
                    heap.push(Reverse((t, vc.peer)));
                }
            }
        }
        while let Some(&Reverse((t, peer))) = heap.peek() {
            if vcs.get(&peer).is_some_and(|vc| vc.armed.get() == Some(t)) {
                return Some(t);
            }
            heap.pop();
        }
        None
    }

    /// The VCs whose deadline has come at `now`, taken out of the heap
    /// (not armed until the caller rearms each after its timeout).
    pub(super) fn take_due(&self, vcs: &Map<SocketAddr, Vc>, cfg: &EngineConfig, now: u64) -> Vec<SocketAddr> {
        let mut due = Vec::new();
        let first = self.next(vcs, cfg);
        if !self.kept.get() {
            // Few VCs (`next` walked them): the due ones by another walk.
            if first.is_some_and(|t| t <= now) {
                due.extend(
                    vcs.values()
                        .filter(|vc| vc.next_deadline(cfg).is_some_and(|t| t <= now))
                        .map(|vc| vc.peer),
                );
                self.top.set(None);
            }
            return due;
        }
        while self.next(vcs, cfg).is_some_and(|t| t <= now) {
            self.top.set(None);
            if let Some(Reverse((_, peer))) = self.heap.borrow_mut().pop() {
                if let Some(vc) = vcs.get(&peer) {
                    vc.armed.set(None);
                }
                due.push(peer);
            }
        }
        due
    }
}
