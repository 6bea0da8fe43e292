//! Event queues (fi_eq(3)): control-path events (connection management,
//! asynchronous AV/MR completions, application-written events) and errors,
//! in one ordered queue like the CQ.

use crate::ffi::*;
use crate::fid::{base_ops, fid_header, FidObj, Refs, Table};
use crate::wait::{check_wait_attr, control_wait, deadline_ms, lock, Sources, Wait, WaitSet, Waitable};
use std::any::Any;
use std::collections::VecDeque;
use std::ffi::{c_char, c_void};
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, Weak};

/// An asynchronous error (fi_eq_err_entry minus the buffer plumbing).
#[derive(Clone, Debug)]
pub struct EqError {
    pub fid: fid_t,
    pub context: *mut c_void,
    pub data: u64,
    /// Positive FI_E* code.
    pub err: i32,
    pub prov_errno: i32,
    pub err_data: Vec<u8>,
}
// SAFETY: `fid` and `context` are handed back to the application; gnix never
// dereferences them through an EqError.
unsafe impl Send for EqError {}

impl Default for EqError {
    fn default() -> Self {
        EqError {
            fid: std::ptr::null_mut(),
            context: std::ptr::null_mut(),
            data: 0,
            err: 0,
            prov_errno: 0,
            err_data: Vec::new(),
        }
    }
}

enum Ev {
    Ok { event: u32, data: Vec<u8> },
    Err(Box<EqError>),
}

struct Queue {
    q: VecDeque<Ev>,
    nerr: usize,
    /// Backs err_data when the application gave no buffer (fi_eq(3)).
    err_buf: Vec<u8>,
}

pub struct Eq {
    /// Objects bound to this EQ (endpoints, AVs, MRs) hold a count:
    /// fi_close is -FI_EBUSY until they let go.
    pub refs: Refs,
    q: Mutex<Queue>,
    wait_obj: fi_wait_obj,
    context: usize,
    sources: Sources,
    wait: Wait,
    _keepalive: Box<dyn Any + Send + Sync>,
}

impl AsRef<Refs> for Eq {
    fn as_ref(&self) -> &Refs {
        &self.refs
    }
}

impl Eq {
    pub fn new(
        wait_obj: fi_wait_obj,
        context: *mut c_void,
        waitset: Option<Arc<WaitSet>>,
        keepalive: Box<dyn Any + Send + Sync>,
    ) -> Result<Arc<Eq>, i32> {
        let eq = Arc::new(Eq {
            refs: Refs::default(),
            q: Mutex::new(Queue {
                q: VecDeque::new(),
                nerr: 0,
                err_buf: Vec::new(),
            }),
            wait_obj,
            context: context as usize,
            sources: Sources::new(None),
            wait: Wait::new(waitset, wait_obj)?,
            _keepalive: keepalive,
        });
        if let Some(ws) = eq.wait.set() {
            ws.add_member(Arc::downgrade(&eq) as Weak<dyn Waitable>);
        }
        Ok(eq)
    }

    pub fn context(&self) -> *mut c_void {
        self.context as *mut c_void
    }

    fn enqueue(&self, e: Ev) {
        {
            let mut q = lock(&self.q);
            if let Ev::Err(_) = e {
                q.nerr += 1;
            }
            q.q.push_back(e);
        }
        self.wait.notify();
    }

    /// Queues an event; `buf` is its whole body as fi_eq_read returns it
    /// (an fi_eq_entry, or an fi_eq_cm_entry followed by connection data).
    /// `flags` is reserved and ignored.
    pub fn push(&self, event: u32, buf: &[u8], _flags: u64) {
        self.enqueue(Ev::Ok {
            event,
            data: buf.to_vec(),
        });
    }

    pub fn push_err(&self, e: EqError) {
        self.enqueue(Ev::Err(Box::new(e)));
    }

    pub fn has_events(&self) -> bool {
        !lock(&self.q).q.is_empty()
    }

    fn take(&self, out: &mut [u8], peek: bool) -> Result<(u32, usize), i32> {
        let mut q = lock(&self.q);
        match q.q.front() {
            None => Err(-FI_EAGAIN),
            Some(Ev::Err(_)) => Err(-FI_EAVAIL),
            Some(Ev::Ok { event, data }) => {
                // No buffer at all (NULL, 0): the event type alone, as
                // libfabric's util EQ answers (fabtests' fi_multinode_coll
                // waits for FI_JOIN_COMPLETE this way).
                let n = if out.is_empty() { 0 } else { data.len() };
                if out.len() < n {
                    return Err(-FI_ETOOSMALL);
                }
                let r = (*event, n);
                out[..n].copy_from_slice(&data[..n]);
                if !peek {
                    q.q.pop_front();
                }
                Ok(r)
            }
        }
    }

    /// fi_eq_read: one event into `out`; (event, bytes). -FI_EAGAIN when
    /// empty, -FI_EAVAIL when an error is next, -FI_ETOOSMALL (event kept)
    /// when `out` cannot hold it.
    pub fn read(&self, out: &mut [u8], peek: bool) -> Result<(u32, usize), i32> {
        match self.take(out, peek) {
            Err(e) if e == -FI_EAGAIN => {
                self.sources.progress();
                self.take(out, peek)
            }
            r => r,
        }
    }

    /// fi_eq_sread; -FI_EAGAIN on timeout.
    pub fn sread(&self, out: &mut [u8], timeout: i32, peek: bool) -> Result<(u32, usize), i32> {
        let w = match &self.wait {
            Wait::Own(w) => w.clone(),
            Wait::None => {
                crate::warn!(FI_LOG_EQ, "fi_eq_sread: the EQ was opened with FI_WAIT_NONE");
                return Err(-FI_ENOSYS);
            }
            Wait::Set(..) => {
                crate::warn!(FI_LOG_EQ, "fi_eq_sread: the EQ belongs to a wait set; use fi_wait");
                return Err(-FI_EINVAL);
            }
        };
        let r = w.block(
            || self.sources.progress(),
            |fds: &mut Vec<RawFd>, next: &mut Option<u64>| self.sources.collect(fds, next),
            |gen| self.sources.disarm(gen),
            || match self.take(out, peek) {
                Err(e) if e == -FI_EAGAIN => None,
                r => Some(r),
            },
            deadline_ms(timeout),
            || false,
        );
        r.unwrap_or(Err(-FI_EAGAIN))
    }

    /// fi_eq_readerr: takes the oldest error; err_data rules as for CQs.
    pub fn readerr(&self, user: Option<&mut [u8]>) -> Result<fi_eq_err_entry, i32> {
        let mut q = lock(&self.q);
        if q.nerr == 0 {
            return Err(-FI_EAGAIN);
        }
        let Some(i) = q.q.iter().position(|e| matches!(e, Ev::Err(_))) else {
            return Err(-FI_EAGAIN);
        };
        let Some(Ev::Err(e)) = q.q.remove(i) else {
            return Err(-FI_EAGAIN);
        };
        q.nerr -= 1;
        let e = *e;
        let (err_data, err_data_size) = match user {
            Some(b) if !b.is_empty() => {
                let n = b.len().min(e.err_data.len());
                b[..n].copy_from_slice(&e.err_data[..n]);
                (b.as_mut_ptr() as *mut c_void, n)
            }
            _ => {
                q.err_buf = e.err_data;
                let p = if q.err_buf.is_empty() {
                    std::ptr::null_mut()
                } else {
                    q.err_buf.as_mut_ptr() as *mut c_void
                };
                (p, q.err_buf.len())
            }
        };
        Ok(fi_eq_err_entry {
            fid: e.fid,
            context: e.context,
            data: e.data,
            err: e.err,
            prov_errno: e.prov_errno,
            err_data,
            err_data_size,
        })
    }

    pub(crate) fn trywait(&self) -> i32 {
        self.wait.trywait(&self.sources, FI_LOG_EQ, "EQ", || self.has_events())
    }
}

impl Waitable for Eq {
    fn progress_sources(&self) {
        self.sources.progress();
    }
    fn has_event(&self) -> bool {
        self.has_events()
    }
    fn collect(&self, fds: &mut Vec<RawFd>, next: &mut Option<u64>) -> u64 {
        self.sources.collect(fds, next)
    }
}

// ---------------------------------------------------------------------------
// The C face

type Obj = FidObj<fid_eq, Eq>;

/// fi_eq_open, called by the fabric's shim. `keepalive` is whatever must
/// outlive the EQ's state (the shim passes its `ParentRef<Fabric>`, so the
/// fabric stays busy until the EQ is gone).
///
/// # Safety
/// `attr` must be NULL or point to a readable fi_eq_attr.
pub unsafe fn open(
    attr: *mut fi_eq_attr,
    context: *mut c_void,
    keepalive: Box<dyn Any + Send + Sync>,
) -> Result<*mut fid_eq, i32> {
    let (wait_obj, ws) = if attr.is_null() {
        (FI_WAIT_NONE, None)
    } else {
        // SAFETY: the caller's contract: `attr` is readable (and not NULL here).
        let a = unsafe { &*attr };
        if a.flags & !(FI_WRITE | FI_AFFINITY) != 0 {
            crate::warn!(
                FI_LOG_EQ,
                "fi_eq_open: unknown flags {:#x}",
                a.flags & !(FI_WRITE | FI_AFFINITY)
            );
            return Err(-FI_EINVAL);
        }
        (
            a.wait_obj,
            check_wait_attr(a.wait_obj, a.wait_set, FI_LOG_EQ, "fi_eq_open")?,
        )
    };
    let eq = Eq::new(wait_obj, context, ws, keepalive)?;
    Ok(into_fid(eq))
}

/// Wraps EQ state in the fid_eq the application holds.
pub(crate) fn into_fid(eq: Arc<Eq>) -> *mut fid_eq {
    let c = fid_eq {
        fid: fid_header(FI_CLASS_EQ, eq.context(), EQ_FI_OPS.ptr()),
        ops: EQ_OPS.ptr(),
    };
    Obj::create(c, eq)
}

/// The EQ behind an application-supplied fid (fi_ep_bind, fi_pep_bind,
/// fi_av_bind): checks class and magic.
///
/// # Safety
/// `p` must be NULL or point to readable memory of at least a `struct fid`.
pub unsafe fn from_fid(p: *const c_void) -> Option<Arc<Eq>> {
    // SAFETY: the caller's contract (`p` NULL or a readable fid).
    (unsafe { Obj::get(p, FI_CLASS_EQ) }).cloned()
}

unsafe extern "C" fn close(f: *mut fid) -> i32 {
    abi_guard!("close", -FI_EOTHER, || {
        // SAFETY: `f` is the application's fid, or NULL (fi_close(3)).
        unsafe { crate::fid::close_unless_busy::<fid_eq, Eq>(f, FI_CLASS_EQ, FI_LOG_EQ, "objects bound to the EQ") }
    })
}

unsafe extern "C" fn control(f: *mut fid, cmd: i32, arg: *mut c_void) -> i32 {
    abi_guard!("control", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(eq) = (unsafe { Obj::get(f as *const c_void, FI_CLASS_EQ) }) else {
            return -FI_EINVAL;
        };
        // SAFETY: `arg` is the application's fi_control argument for `cmd`.
        unsafe {
            control_wait(
                eq.wait_obj,
                eq.wait.own(),
                |w| {
                    let mut fds = Vec::new();
                    let gen = eq.sources.collect(&mut fds, &mut None);
                    w.refresh(&mut fds, gen);
                },
                cmd,
                arg,
                FI_LOG_EQ,
            )
        }
    })
}

/// # Safety
/// `buf` must be NULL or writable for `len` bytes.
unsafe fn out_buf<'a>(buf: *mut c_void, len: usize) -> &'a mut [u8] {
    if buf.is_null() || len == 0 {
        &mut []
    } else {
        // SAFETY: the caller's contract: `buf` (non-NULL) holds `len` bytes.
        unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, len) }
    }
}

fn check_read_flags(flags: u64, what: &str) -> Result<bool, isize> {
    if flags & !FI_PEEK != 0 {
        crate::warn!(FI_LOG_EQ, "{}: unknown flags {:#x}", what, flags & !FI_PEEK);
        return Err(-FI_EINVAL as isize);
    }
    Ok(flags & FI_PEEK != 0)
}

/// The ssize_t of fi_eq_read/sread, storing the event type through `event`.
///
/// # Safety
/// `event` must be NULL or writable for one u32.
unsafe fn finish(r: Result<(u32, usize), i32>, event: *mut u32) -> isize {
    match r {
        Ok((ev, n)) => {
            if !event.is_null() {
                // SAFETY: the application's event slot.
                unsafe { *event = ev };
            }
            n as isize
        }
        Err(e) => e as isize,
    }
}

unsafe extern "C" fn eq_read(e: *mut fid_eq, event: *mut u32, buf: *mut c_void, len: usize, flags: u64) -> isize {
    abi_guard!("eq_read", -FI_EOTHER as isize, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(eq) = (unsafe { Obj::get(e as *const c_void, FI_CLASS_EQ) }) else {
            return -FI_EINVAL as isize;
        };
        let peek = match check_read_flags(flags, "fi_eq_read") {
            Ok(p) => p,
            Err(r) => return r,
        };
        // SAFETY: fi_eq_read(3): `buf` holds `len` bytes, `event` one u32.
        unsafe { finish(eq.read(out_buf(buf, len), peek), event) }
    })
}

unsafe extern "C" fn eq_sread(
    e: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    timeout: i32,
    flags: u64,
) -> isize {
    abi_guard!("eq_sread", -FI_EOTHER as isize, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(eq) = (unsafe { Obj::get(e as *const c_void, FI_CLASS_EQ) }) else {
            return -FI_EINVAL as isize;
        };
        let peek = match check_read_flags(flags, "fi_eq_sread") {
            Ok(p) => p,
            Err(r) => return r,
        };
        // SAFETY: as in eq_read.
        unsafe { finish(eq.sread(out_buf(buf, len), timeout, peek), event) }
    })
}

unsafe extern "C" fn eq_readerr(e: *mut fid_eq, buf: *mut fi_eq_err_entry, flags: u64) -> isize {
    abi_guard!("eq_readerr", -FI_EOTHER as isize, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(eq) = (unsafe { Obj::get(e as *const c_void, FI_CLASS_EQ) }) else {
            return -FI_EINVAL as isize;
        };
        if buf.is_null() {
            crate::warn!(FI_LOG_EQ, "fi_eq_readerr: NULL buffer");
            return -FI_EINVAL as isize;
        }
        if flags != 0 {
            crate::warn!(FI_LOG_EQ, "fi_eq_readerr: unknown flags {:#x}", flags);
            return -FI_EINVAL as isize;
        }
        // SAFETY: `buf` is the application's fi_eq_err_entry; with a nonzero
        // err_data_size, err_data is its buffer of that size (fi_eq(3)).
        let user = unsafe { crate::abi::app_err_data((*buf).err_data, (*buf).err_data_size) };
        match eq.readerr(user) {
            Ok(entry) => {
                // SAFETY: `buf` is the application's error entry (non-NULL, checked above); only the 1.17 fields are written.
                unsafe { *buf = entry };
                std::mem::size_of::<fi_eq_err_entry>() as isize
            }
            Err(r) => r as isize,
        }
    })
}

unsafe extern "C" fn eq_write(e: *mut fid_eq, event: u32, buf: *const c_void, len: usize, flags: u64) -> isize {
    abi_guard!("eq_write", -FI_EOTHER as isize, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(eq) = (unsafe { Obj::get(e as *const c_void, FI_CLASS_EQ) }) else {
            return -FI_EINVAL as isize;
        };
        if flags != 0 {
            crate::warn!(FI_LOG_EQ, "fi_eq_write: unknown flags {:#x}", flags);
            return -FI_EINVAL as isize;
        }
        if buf.is_null() && len > 0 {
            crate::warn!(FI_LOG_EQ, "fi_eq_write: NULL buffer with len {}", len);
            return -FI_EINVAL as isize;
        }
        let data: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: fi_eq_write(3): `buf` holds `len` bytes.
            unsafe { std::slice::from_raw_parts(buf as *const u8, len) }
        };
        eq.push(event, data, 0);
        len as isize
    })
}

unsafe extern "C" fn eq_strerror(
    _e: *mut fid_eq,
    prov_errno: i32,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    abi_guard!("eq_strerror", std::ptr::null(), || {
        // SAFETY: fi_eq_strerror(3): `buf` is NULL or holds `len` bytes.
        unsafe { crate::cq::strerror(prov_errno, buf, len) }
    })
}

static EQ_FI_OPS: Table<fi_ops> = Table(base_ops(close, None, Some(control), None));
static EQ_OPS: Table<fi_ops_eq> = Table(fi_ops_eq {
    size: std::mem::size_of::<fi_ops_eq>(),
    read: Some(eq_read),
    readerr: Some(eq_readerr),
    write: Some(eq_write),
    sread: Some(eq_sread),
    strerror: Some(eq_strerror),
});

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn eq(wait_obj: fi_wait_obj) -> Arc<Eq> {
        Eq::new(wait_obj, std::ptr::null_mut(), None, Box::new(())).unwrap()
    }

    #[test]
    fn read_peek_toosmall_and_error_order() {
        let eq = eq(FI_WAIT_NONE);
        let mut buf = [0u8; 64];
        assert_eq!(eq.read(&mut buf, false), Err(-FI_EAGAIN));
        eq.push(FI_CONNECTED, &[1u8; 24], 0);
        eq.push_err(EqError {
            err: FI_ECONNREFUSED,
            prov_errno: 3,
            data: 9,
            err_data: b"why".to_vec(),
            ..Default::default()
        });
        eq.push(FI_SHUTDOWN, &[2u8; 40], 0);
        assert_eq!(eq.read(&mut buf[..10], false), Err(-FI_ETOOSMALL));
        assert_eq!(eq.read(&mut buf, true), Ok((FI_CONNECTED, 24)));
        assert_eq!(eq.read(&mut buf, false), Ok((FI_CONNECTED, 24)));
        assert_eq!(&buf[..24], &[1u8; 24]);
        assert_eq!(eq.read(&mut buf, false), Err(-FI_EAVAIL));
        let e = eq.readerr(None).unwrap();
        assert_eq!(
            (e.err, e.prov_errno, e.data, e.err_data_size),
            (FI_ECONNREFUSED, 3, 9, 3)
        );
        assert_eq!(eq.readerr(None).unwrap_err(), -FI_EAGAIN);
        assert_eq!(eq.read(&mut buf, false), Ok((FI_SHUTDOWN, 40)));
    }

    #[test]
    fn sread_timeout_and_wakeup() {
        let eq = eq(FI_WAIT_UNSPEC);
        let mut buf = [0u8; 64];
        let t0 = Instant::now();
        assert_eq!(eq.sread(&mut buf, 100, false), Err(-FI_EAGAIN));
        assert!(t0.elapsed() >= Duration::from_millis(95));
        // A reader that blocks without a timeout: once it sleeps in the
        // EQ's wait object, only the push can end its read.
        let e2 = eq.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            e2.sread(&mut buf, -1, false)
        });
        let wobj = eq.wait.own().expect("an EQ with its own wait object");
        crate::wait::testutil::wait_until("the reader sleeps in the EQ's wait object", || wobj.asleep() == 1);
        eq.push(FI_NOTIFY, &[0u8; 24], 0);
        let got = crate::wait::testutil::join_within(reader, "the push woke the reader");
        assert_eq!(got, Ok((FI_NOTIFY, 24)));
    }

    #[test]
    fn c_shims_write_read_readerr() {
        let e = eq(FI_WAIT_NONE);
        let p = into_fid(e.clone());
        // SAFETY: p is a live fid_eq; buffers are sized per the API.
        unsafe {
            let ops = &*(*p).ops;
            let entry = fi_eq_entry {
                fid: p as *mut fid,
                context: 5 as *mut c_void,
                data: 6,
            };
            let sz = std::mem::size_of::<fi_eq_entry>();
            assert_eq!(
                ops.write.unwrap()(p, FI_NOTIFY, &entry as *const _ as *const c_void, sz, 0),
                sz as isize
            );
            assert_eq!(
                ops.write.unwrap()(p, FI_NOTIFY, &entry as *const _ as *const c_void, sz, 1),
                -FI_EINVAL as isize
            );
            let mut ev = 0u32;
            let mut out: fi_eq_entry = std::mem::zeroed();
            assert_eq!(
                ops.read.unwrap()(p, &mut ev, &mut out as *mut _ as *mut c_void, sz, FI_SEND),
                -FI_EINVAL as isize
            );
            assert_eq!(
                ops.read.unwrap()(p, &mut ev, &mut out as *mut _ as *mut c_void, sz, 0),
                sz as isize
            );
            assert_eq!((ev, out.context as usize, out.data), (FI_NOTIFY, 5, 6));
            e.push_err(EqError {
                err: FI_EIO,
                err_data: vec![1, 2, 3, 4],
                ..Default::default()
            });
            let mut small = [0u8; 2];
            let mut ee: fi_eq_err_entry = std::mem::zeroed();
            ee.err_data = small.as_mut_ptr() as *mut c_void;
            ee.err_data_size = 2;
            assert_eq!(
                ops.readerr.unwrap()(p, &mut ee, 0),
                std::mem::size_of::<fi_eq_err_entry>() as isize
            );
            assert_eq!((ee.err, ee.err_data_size, small), (FI_EIO, 2, [1, 2]));
            assert_eq!(
                ops.sread.unwrap()(p, &mut ev, &mut out as *mut _ as *mut c_void, sz, 0, 0),
                -FI_ENOSYS as isize
            );
            e.refs.get();
            assert_eq!((*(*p).fid.ops).close.unwrap()(p as *mut fid), -FI_EBUSY);
            e.refs.put();
            assert_eq!((*(*p).fid.ops).close.unwrap()(p as *mut fid), 0);
        }
    }
}
