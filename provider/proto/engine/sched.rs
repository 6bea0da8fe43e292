//! Scheduling: which VC transmits next. VCs that may have something to
//! send wait in a ready queue, served round robin, each for a burst of
//! datagrams; a VC joins the queue when something makes it able to send
//! (a new message, an ACK that opens its window, a timer) and leaves it
//! when a turn finds nothing more to send.

#[cfg(any(test, feature = "fuzz"))]
use super::source::OneOut;
use super::source::{PayloadMode, Transmit, TxOut};
use super::vc::Vc;
use super::Engine;
use std::collections::VecDeque;
use std::net::SocketAddr;

/// Datagrams one VC sends in a row before the next ready VC's turn.
const BURST: usize = 64;

/// Queues `vc` for a transmission turn, unless it is queued already.
pub(super) fn mark_ready(ready: &mut VecDeque<SocketAddr>, vc: &mut Vc) {
    if !vc.in_ready {
        vc.in_ready = true;
        ready.push_back(vc.peer);
    }
}

impl Engine {
    /// The next datagram, payload included, in `buf`: `poll_transmit_burst`
    /// taking one datagram at a time (the tests' and the fuzzer's way in).
    #[cfg(any(test, feature = "fuzz"))]
    pub fn poll_transmit(&mut self, now: u64, buf: &mut [u8]) -> Option<(SocketAddr, usize)> {
        let mut one = OneOut { buf, sent: None };
        self.poll_transmit_burst(now, &mut one);
        one.sent
    }

    /// Builds datagrams into `out` until no VC has anything to send or
    /// `out` says stop. As `poll_transmit`, except that a payload is not
    /// copied behind its header: `out` sends it from the source (gather
    /// I/O), saving a copy of every byte of bulk data; a source is valid
    /// only until `commit` returns. A VC sends up to `BURST` datagrams in
    /// a row, with one lookup, before the next ready VC's turn: bulk data
    /// over a 1500-byte MTU is hundreds of segments per MiB, and the
    /// per-datagram round through the ready queue cost as much as the
    /// segment itself.
    pub fn poll_transmit_burst(&mut self, now: u64, out: &mut dyn TxOut) {
        self.settle();
        // A source found in one call is never trusted in the next: after
        // its FIN it must not be read again.
        self.scratch.reset();
        if !self.challenges.is_empty() && !self.send_challenges(now, out) {
            return;
        }
        while let Some(&addr) = self.ready.front() {
            let Some(vc) = self.vcs.get_mut(&addr) else {
                self.ready.pop_front();
                continue;
            };
            let (mut sent, mut idle, mut stop) = (0, false, false);
            while sent < BURST {
                // Bulk data: a message's segments in a row (run.rs).
                let run = if self.runs {
                    vc.transmit_run(&mut self.sh, &mut self.scratch, now, out, BURST - sent)
                } else {
                    None
                };
                if let Some(run) = run {
                    sent += run.sent;
                    if run.stop {
                        stop = true;
                        break;
                    }
                    continue;
                }
                let Some(buf) = out.slot() else {
                    stop = true;
                    break;
                };
                let Some(len) = vc.transmit_counted(&mut self.sh, &mut self.scratch, PayloadMode::Gather, now, buf)
                else {
                    idle = true;
                    break;
                };
                sent += 1;
                let (hdr_len, payload) = self.scratch.take_payload(vc, len);
                let t = Transmit {
                    to: addr,
                    len,
                    hdr_len,
                    payload,
                };
                if !out.commit(t) {
                    stop = true;
                    break;
                }
            }
            // Its turn moved its timers (an RTO armed, an ACK sent).
            self.timers.rearm(vc, &self.sh.cfg);
            if stop && sent == 0 {
                break;
            }
            // Only a VC with more queued comes round again: the call that
            // would find nothing cost as much as the one that sent. (Credit
            // news that waited for this turn's segments follows them.)
            self.ready.pop_front();
            vc.in_ready = !idle && (vc.may_transmit(now) || sent > 0 && vc.credit_news.is_some());
            if vc.in_ready {
                self.ready.push_back(addr);
            }
            if stop {
                break;
            }
        }
        self.scratch.reset();
    }

    /// Whether `poll_transmit` could return anything (no VC is marked
    /// ready): lets a polling caller skip it cheaply.
    pub fn transmit_idle(&self) -> bool {
        self.ready.is_empty() && self.challenges.is_empty()
    }
}
