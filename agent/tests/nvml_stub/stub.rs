//! Test helper: builds the stand-in `libnvidia-ml.so.1` from
//! `agent/tests/nvml_stub/nvml_stub.c` with the system C compiler (once per
//! test binary) and gives every test its own copy with its own config file
//! (`nvml-stub.conf` next to the library; see the C file for the format).
//! Used by the agent's and the testkit's tests (`#[path]`-included).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

const SOURCE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../agent/tests/nvml_stub/nvml_stub.c"
);

/// Compiles the stand-in once; returns the shared build.
pub fn built() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let source = std::fs::canonicalize(SOURCE).expect("nvml_stub.c exists");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("nvml-stub");
        std::fs::create_dir_all(&dir).expect("create the stub build dir");
        let lib = dir.join("libnvidia-ml.so.1");
        // Build under a unique name, then rename: test binaries run at once.
        let tmp = dir.join(format!("libnvidia-ml.{}.so.tmp", std::process::id()));
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let out = Command::new(&cc)
            .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
            .arg(&tmp)
            .arg(&source)
            .args(["-lpthread", "-ldl"])
            .output()
            .unwrap_or_else(|e| panic!("running {cc}: {e}"));
        assert!(
            out.status.success(),
            "building the NVML stand-in failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::rename(&tmp, &lib).expect("install the stub");
        lib
    })
}

/// A private copy of the stand-in with its own configuration.
pub struct Stub {
    pub dir: tempfile::TempDir,
    pub lib: PathBuf,
    version: AtomicU64,
}

impl Stub {
    /// A copy configured with `config` (the stub's text format).
    pub fn new(config: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let lib = dir.path().join("libnvidia-ml.so.1");
        std::fs::copy(built(), &lib).expect("copy the stub");
        let stub = Self {
            dir,
            lib,
            version: AtomicU64::new(0),
        };
        stub.set(config);
        stub
    }

    /// The library path as a string, for `nvml_library_path`.
    pub fn path(&self) -> String {
        self.lib.to_string_lossy().into_owned()
    }

    /// Calls the agent made of the entry point `function` of this copy
    /// (`nvmlStubCallsOf`). The agent loads the copy by the same path, so
    /// the dynamic linker hands out the same instance and its counters.
    pub fn calls_of(&self, function: &str) -> u64 {
        let name = std::ffi::CString::new(function).expect("a C name");
        // SAFETY: the stand-in is our own C library, whose initialisers
        // only set statics; `nvmlStubCallsOf` takes a NUL-terminated name
        // and returns a count.
        unsafe {
            let lib = libloading::Library::new(&self.lib).expect("load the stand-in");
            let calls_of: libloading::Symbol<unsafe extern "C" fn(*const std::ffi::c_char) -> u64> =
                lib.get(b"nvmlStubCallsOf\0").expect("nvmlStubCallsOf");
            calls_of(name.as_ptr())
        }
    }

    /// Replaces the configuration; the stub re-reads it at its next tick.
    pub fn set(&self, config: &str) {
        let v = self.version.fetch_add(1, Ordering::SeqCst);
        let text = format!("# version {v}\n{config}\n");
        let tmp = self.dir.path().join("nvml-stub.conf.tmp");
        std::fs::write(&tmp, text).expect("write stub config");
        std::fs::rename(&tmp, self.dir.path().join("nvml-stub.conf")).expect("install config");
    }
}
