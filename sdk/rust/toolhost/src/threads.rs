//! threads.rs - the plugin's own threads: started with spawn(), joined by
//! the plugin's fini, so that no thread runs plugin code once the host
//! unloads the object (plugin.h, "Plugin threads and unloading").
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};
use std::thread::{self, JoinHandle};

static THREADS: Mutex<Vec<JoinHandle<()>>> = Mutex::new(Vec::new());

fn threads() -> MutexGuard<'static, Vec<JoinHandle<()>>> {
    THREADS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts a thread of the plugin.  The plugin's fini waits for it: it must
/// end once the calls it serves have completed (a panic in it is caught
/// and logged).  Returns the error of the thread's creation.
pub fn spawn<F: FnOnce() + Send + 'static>(f: F) -> std::io::Result<()> {
    let h = thread::Builder::new()
        .name("toolhost-plugin".into())
        .spawn(move || {
            let _ = panic::catch_unwind(AssertUnwindSafe(f));
        })?;
    let done: Vec<JoinHandle<()>> = {
        let mut v = threads();
        let (done, running): (Vec<_>, Vec<_>) = v.drain(..).partition(|h| h.is_finished());
        *v = running;
        v.push(h);
        done
    };
    for h in done {
        let _ = h.join();
    }
    Ok(())
}

/// Joins every thread spawn() started (fini).
pub(crate) fn join_all() {
    loop {
        let v: Vec<JoinHandle<()>> = std::mem::take(&mut *threads());
        if v.is_empty() {
            return;
        }
        for h in v {
            let _ = h.join();
        }
    }
}
