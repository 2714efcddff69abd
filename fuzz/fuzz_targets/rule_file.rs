//! Any bytes as a rule file: the loader answers rules or errors with a position, never panics.
//! Inputs go to one long-lived thread with the loader's stack (the product starts such a thread
//! per load; starting one per input would make this target a hundred times slower).
#![no_main]

use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use libfuzzer_sys::fuzz_target;
use turnstile::config::{FUZZ_LOADER_STACK, LoadOptions, parse_files_on_this_thread};

type Job = (Vec<u8>, SyncSender<()>);

fn loader() -> &'static std::sync::Mutex<SyncSender<Job>> {
    static LOADER: OnceLock<std::sync::Mutex<SyncSender<Job>>> = OnceLock::new();
    LOADER.get_or_init(|| {
        let (tx, rx): (SyncSender<Job>, Receiver<Job>) = sync_channel(0);
        std::thread::Builder::new()
            .stack_size(FUZZ_LOADER_STACK)
            .spawn(move || {
                for (data, done) in rx {
                    check(&data);
                    let _ = done.send(());
                }
            })
            .expect("loader thread");
        std::sync::Mutex::new(tx)
    })
}

fn check(data: &[u8]) {
    let text = String::from_utf8_lossy(data).into_owned();
    let files = [("fuzz.yaml".to_owned(), text)];
    if let Err(errors) = parse_files_on_this_thread(&files, LoadOptions::default()) {
        assert!(!errors.0.is_empty(), "an error list is never empty");
        for e in &errors.0 {
            assert_eq!(e.origin, "fuzz.yaml");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let (done_tx, done_rx) = sync_channel(1);
    let sender = loader().lock().expect("loader").clone();
    sender.send((data.to_vec(), done_tx)).expect("loader alive");
    // A panic in the loader thread drops `done_tx` unsent: fail here so libFuzzer records it.
    done_rx.recv().expect("the loader panicked on this input");
});
