//! Two- and three-process scenarios over RDM endpoints. Rank 0 receives,
//! rank 1 sends (see tests/clients/fitest_pair.h and fitest_pair_progress.h for each scenario).
mod common;
use common::{pair, Scenario};

#[test]
fn msg_send_sendv_sendmsg_inject_senddata_injectdata() {
    pair("msg_ops", None);
}

#[test]
fn tagged_ops_and_ignore_bits() {
    pair("tagged_ops", None);
}

#[test]
fn cq_format_context() {
    pair("cq_format", Some("context"));
}

#[test]
fn cq_format_msg() {
    pair("cq_format", Some("msg"));
}

#[test]
fn cq_format_data() {
    pair("cq_format", Some("data"));
}

#[test]
fn cq_format_tagged() {
    pair("cq_format", Some("tagged"));
}

#[test]
fn fi_source_readfrom() {
    pair("source", None);
}

#[test]
fn fi_source_err_unknown_sender() {
    // Other providers may skip it (not all advertise FI_SOURCE_ERR); gnix
    // does advertise it, so it must not.
    Scenario::new("source_err", 2).run();
}

#[test]
fn directed_recv_three_processes() {
    Scenario::new("directed", 3).run();
}

#[test]
fn selective_completion_with_counters() {
    pair("selective", None);
}

#[test]
fn op_flags_inject_transmit_delivery_complete() {
    pair("op_flags", None);
}

#[test]
fn truncation_eager() {
    pair("trunc", Some("eager"));
}

#[test]
fn truncation_rendezvous_1mib() {
    pair("trunc", Some("large"));
}

#[test]
fn unexpected_messages_small_and_large() {
    pair("unexpected", None);
}

#[test]
fn ordering_mixed_sizes_up_to_4mib() {
    pair("ordering", None);
}

/// Local peers under different last-level caches (FI_GNIX_SHM_CACHE=0:
/// neither names one) copy at most 4 slots a message and pull longer ones;
/// peers naming the same cache copy up to 8 (a 64 KiB message whole):
/// either way every size arrives whole and in order, matched or not.
#[test]
fn ordering_and_unexpected_across_and_within_a_cache() {
    for cache in ["0", "7"] {
        for scenario in ["ordering", "unexpected"] {
            Scenario::new(scenario, 2).env("FI_GNIX_SHM_CACHE", cache).run();
        }
    }
}

/// Sends of up to the inject size try the short way first
/// (`Ep::send_small`); to a peer whose slots are smaller than the message
/// (FI_GNIX_SHM_EAGER=64) or whose ring is full (FI_GNIX_SHM_DEPTH=4)
/// they go the general way, and every size still arrives whole and in
/// order, matched or not.
#[test]
fn sends_the_short_way_refuses_go_the_general_way() {
    for (var, val) in [("FI_GNIX_SHM_EAGER", "64"), ("FI_GNIX_SHM_DEPTH", "4")] {
        for scenario in ["ordering", "unexpected"] {
            Scenario::new(scenario, 2).env(var, val).run();
        }
    }
}

#[test]
fn ten_thousand_posted_tagged_receives() {
    Scenario::new("many_recvs", 2).timeout(90).run();
}

#[test]
fn cq_overrun_small_cq_loses_nothing() {
    pair("cq_overrun", None);
}

#[test]
fn cq_sread_wait_fd() {
    pair("cq_sread", Some("fd"));
}

#[test]
fn cq_sread_wait_unspec() {
    pair("cq_sread", Some("unspec"));
}

/// A thread asleep in fi_cq_sread is woken by the message even after
/// another thread polled the same endpoint meanwhile and stopped (manual
/// progress: nothing else looks).
#[test]
fn cq_sread_while_another_thread_polls() {
    pair("cq_sread", Some("polled"));
}

#[test]
fn counters_bound_to_endpoint() {
    pair("cntr_ep", None);
}

#[test]
fn multi_recv_buffer() {
    pair("multi_recv", None);
}

#[test]
fn zero_length_null_buffers() {
    pair("zero_len", None);
}

#[test]
fn peek_claim_discard() {
    pair("peek", None);
}

#[test]
fn thread_safe_two_threads_per_endpoint() {
    pair("threads", None);
}

#[test]
fn progress_auto_without_polling() {
    pair("progress_auto", None);
}

/// Auto progress runs an endpoint its application does not call while it
/// busy-polls another endpoint of the same domain.
#[test]
fn auto_progress_runs_an_unpolled_endpoint() {
    pair("idle_ep", None);
}

/// Manual progress: a receiver that has its messages and then waits
/// outside libfabric does not hold up the sends it took (eager and
/// rendezvous); on the udp wire their ACKs leave before it stops calling.
#[test]
fn manual_progress_sends_complete_while_the_receiver_waits_elsewhere() {
    pair("quiet_receiver", None);
}

/// Manual progress: a process that takes an inject and then stays away
/// from libfabric for longer than FI_GNIX_PEER_TIMEOUT_MS is not taken
/// for dead by its peer, which polls meanwhile (under manual progress
/// silence fails a peer only after FI_GNIX_MANUAL_PEER_TIMEOUT_MS).
#[test]
fn manual_progress_a_peer_away_longer_than_the_timeout_is_not_dead() {
    Scenario::new("away", 2).env("FI_GNIX_PEER_TIMEOUT_MS", "1000").run();
}

#[test]
fn pingpong_progress_manual() {
    pair("pingpong", Some("manual"));
}

#[test]
fn pingpong_thread_completion() {
    pair("pingpong", Some("completion"));
}

/// A sender that exits right after its sends completed loses none of them:
/// 200 messages, the receiver's ring holds 64 (issue 15: sends parked in
/// the sender's backlog used to complete, and died with it).
#[test]
fn sender_exits_right_after_its_completions() {
    pair("exit_after_send", None);
}

/// fi_cancel of a receive a local sender is about to write into (shm:
/// CTW): nothing lands in the buffer afterwards.
#[test]
fn cancelled_receive_is_not_written_afterwards() {
    pair("ctw_fence", Some("cancel"));
}

/// The same when the receiving endpoint is closed instead.
#[test]
fn closed_receive_is_not_written_afterwards() {
    Scenario::new("ctw_fence", 2)
        .arg("close")
        .env("FI_GNIX_PEER_TIMEOUT_MS", "1000")
        .run();
}

/// Messages from a sender inserted into the AV only after they arrived
/// are found by directed receives for it, in order, with FI_SOURCE (MPI
/// connect/accept and spawn; issue 15).
#[test]
fn directed_receive_after_a_late_av_insert() {
    pair("late_insert", None);
}

/// An address inserted twice names one peer: directed receives for the
/// fi_addr returned the second time find its messages.
#[test]
fn directed_receive_after_a_second_av_insert() {
    pair("late_insert", Some("dup"));
}
