//! What `tiletune table import` does with a JSON file, from bytes: parse and
//! validate the export (`tiletune_tables::parse_export`, which `read_export`
//! uses), screen its rows as the runtime would (`screen_export`), and import
//! what is left into a fresh selector table. Any panic is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use tiletune_kernels::KERNEL_ABI;
use tiletune_tables::{SelectorDb, parse_export};
use tiletune_tuner::screen::screen_export;

fuzz_target!(|data: &[u8]| {
    let Ok(mut export) = parse_export(data, Path::new("<fuzz>")) else {
        return;
    };
    let _ = screen_export(&mut export, KERNEL_ABI);
    // A table per input keeps runs reproducible; tmpfs keeps it cheap.
    let dir = tempfile::Builder::new()
        .prefix("tiletune-fuzz-")
        .tempdir_in(scratch_dir())
        .expect("a scratch directory");
    let mut db = SelectorDb::open(dir.path().join("t.db")).expect("a fresh table opens");
    if db.import(&export).is_ok() {
        // A second import of the same rows must change nothing.
        let again = db.import(&export).expect("a re-import succeeds");
        assert_eq!(again.changed(), 0, "re-import changed rows: {again:?}");
    }
});

fn scratch_dir() -> &'static Path {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() { shm } else { Path::new("/tmp") }
}
