//! A small Chrome DevTools Protocol client for the browser test: headless
//! Chromium started with `--remote-debugging-pipe` (CDP as NUL-terminated
//! JSON messages on file descriptors 3 and 4), so no WebSocket crate and no
//! port are needed.
//!
//! In: the Chromium binary. Out: [`Browser`] (commands, page sessions,
//! buffered events) and [`Page`] (evaluate, wait for a condition, click,
//! screenshot, console errors). The browser dies with the handle.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// [`find_chromium`], or `None` after saying on stderr that `what` did NOT
/// run (a failure instead under `CI=true`, where a missing browser is a
/// missing install step).
pub fn chromium_or_skip(what: &str) -> Option<PathBuf> {
    let found = find_chromium();
    if found.is_none() {
        let msg = format!(
            "chromium is not installed (make deps, or apt-get install chromium); {what} did NOT run"
        );
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "CI=true: {msg}"
        );
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "\n*** SKIPPED: {msg} ***\n");
    }
    found
}

/// The Chromium binary: `$CHROMIUM`, else `chromium` / `chromium-browser` /
/// `google-chrome` on `PATH`.
pub fn find_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |d| d.join(name)))
        .find(|p| p.is_file())
}

pub struct Browser {
    child: Child,
    to_browser: std::fs::File,
    from_browser: mpsc::Receiver<Value>,
    next_id: u64,
    /// Events not yet taken, in arrival order.
    events: Vec<Value>,
    _profile: tempfile::TempDir,
    stderr_path: PathBuf,
}

/// A pipe whose both ends are close-on-exec.
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fresh descriptors into `fds`.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors are open and owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

impl Browser {
    /// Starts headless Chromium with a private profile. The background
    /// networking flags keep it off the network (closed machines, CI).
    pub fn launch(bin: &Path) -> Browser {
        use std::os::fd::AsRawFd;
        let profile = tempfile::tempdir().expect("profile dir");
        let stderr_path = profile.path().join("chromium.stderr");
        let (cmd_r, cmd_w) = pipe(); // we write commands, it reads fd 3
        let (ev_r, ev_w) = pipe(); // it writes fd 4, we read
        let (child_in, child_out) = (cmd_r.as_raw_fd(), ev_w.as_raw_fd());
        let mut cmd = Command::new(bin);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-default-apps",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--hide-scrollbars",
            "--mute-audio",
            "--remote-debugging-pipe",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).expect("stderr file"));
        // SAFETY: only async-signal-safe calls (fcntl, dup2, prctl) between
        // fork and exec. The ends are first moved above 10 so that dup2 onto
        // 3 and 4 cannot clobber one another; dup2 clears close-on-exec.
        unsafe {
            cmd.pre_exec(move || {
                let a = libc::fcntl(child_in, libc::F_DUPFD, 10);
                let b = libc::fcntl(child_out, libc::F_DUPFD, 10);
                if a < 0 || b < 0 || libc::dup2(a, 3) < 0 || libc::dup2(b, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        drop((cmd_r, ev_w)); // the child's ends
        let (tx, rx) = mpsc::channel();
        let reader = std::fs::File::from(ev_r);
        std::thread::spawn(move || {
            let mut r = BufReader::new(reader);
            let mut buf = Vec::new();
            while r.read_until(0, &mut buf).is_ok_and(|n| n > 0) {
                if buf.last() == Some(&0) {
                    buf.pop();
                }
                match serde_json::from_slice::<Value>(&buf) {
                    Ok(v) => {
                        if tx.send(v).is_err() {
                            return;
                        }
                    }
                    Err(e) => eprintln!("cdp: unparsable message ({e})"),
                }
                buf.clear();
            }
        });
        Browser {
            child,
            to_browser: std::fs::File::from(cmd_w),
            from_browser: rx,
            next_id: 0,
            events: Vec::new(),
            _profile: profile,
            stderr_path,
        }
    }

    fn stderr_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let tail: Vec<&str> = s.lines().rev().take(20).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// Sends a command (to a page when `session` is given) and waits up to
    /// 60 s for its answer; events that arrive meanwhile are kept.
    pub fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).expect("json");
        bytes.push(0);
        self.to_browser
            .write_all(&bytes)
            .unwrap_or_else(|e| panic!("CDP write ({method}): {e}\n{}", self.stderr_tail()));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = match self.from_browser.recv_timeout(left) {
                Ok(v) => v,
                Err(e) => panic!(
                    "no CDP answer to {method} ({e}); chromium stderr:\n{}",
                    self.stderr_tail()
                ),
            };
            if v["id"] == json!(id) {
                if let Some(err) = v.get("error") {
                    panic!("CDP {method} failed: {err}");
                }
                return v["result"].clone();
            }
            if v.get("method").is_some() {
                self.events.push(v);
            }
        }
    }

    /// Takes the events received so far (without waiting).
    pub fn take_events(&mut self) -> Vec<Value> {
        while let Ok(v) = self.from_browser.try_recv() {
            if v.get("method").is_some() {
                self.events.push(v);
            }
        }
        std::mem::take(&mut self.events)
    }

    /// Opens a tab of `width` x `height` CSS pixels with Runtime, Log and
    /// Page events on.
    pub fn new_page(&mut self, width: u32, height: u32) -> Page<'_> {
        let target = self.call(None, "Target.createTarget", json!({ "url": "about:blank" }));
        let target_id = target["targetId"].as_str().expect("targetId").to_owned();
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target_id, "flatten": true }),
        );
        let session = attached["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_owned();
        let mut page = Page {
            browser: self,
            session,
            errors: Vec::new(),
        };
        page.cmd("Runtime.enable", json!({}));
        page.cmd("Log.enable", json!({}));
        page.cmd("Page.enable", json!({}));
        page.cmd(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        );
        page
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One console error, uncaught exception or error log entry of a page.
#[derive(Debug, Clone)]
pub struct PageError {
    /// `console`, `exception` or the Log entry's source (`network`, ...).
    pub source: String,
    pub text: String,
}

pub struct Page<'b> {
    browser: &'b mut Browser,
    session: String,
    errors: Vec<PageError>,
}

impl Page<'_> {
    pub fn cmd(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        let out = self.browser.call(Some(&session), method, params);
        self.collect();
        out
    }

    /// Moves this page's error events into `errors`.
    fn collect(&mut self) {
        for ev in self.browser.take_events() {
            if ev["sessionId"].as_str() != Some(self.session.as_str()) {
                continue;
            }
            let p = &ev["params"];
            match ev["method"].as_str().unwrap_or("") {
                "Runtime.consoleAPICalled"
                    if matches!(p["type"].as_str(), Some("error" | "assert")) =>
                {
                    let text = p["args"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .map(|x| {
                                    x["value"]
                                        .as_str()
                                        .map_or_else(|| x["description"].to_string(), str::to_owned)
                                })
                                .collect::<Vec<_>>()
                                .join(" ")
                        })
                        .unwrap_or_default();
                    self.errors.push(PageError {
                        source: "console".into(),
                        text,
                    });
                }
                "Runtime.exceptionThrown" => {
                    let d = &p["exceptionDetails"];
                    let text = d["exception"]["description"]
                        .as_str()
                        .map_or_else(|| d["text"].to_string(), str::to_owned);
                    self.errors.push(PageError {
                        source: "exception".into(),
                        text,
                    });
                }
                "Log.entryAdded" if p["entry"]["level"] == "error" => {
                    self.errors.push(PageError {
                        source: p["entry"]["source"].as_str().unwrap_or("log").to_owned(),
                        text: format!(
                            "{} {}",
                            p["entry"]["text"].as_str().unwrap_or(""),
                            p["entry"]["url"].as_str().unwrap_or("")
                        ),
                    });
                }
                _ => {}
            }
        }
    }

    /// Errors since the last call.
    pub fn take_errors(&mut self) -> Vec<PageError> {
        self.collect();
        std::mem::take(&mut self.errors)
    }

    pub fn navigate(&mut self, url: &str) {
        let r = self.cmd("Page.navigate", json!({ "url": url }));
        assert!(r.get("errorText").is_none(), "navigate {url}: {r}");
    }

    /// Evaluates `expr` (awaiting a promise) and returns its JSON value.
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.cmd(
            "Runtime.evaluate",
            json!({ "expression": expr, "returnByValue": true, "awaitPromise": true }),
        );
        if let Some(ex) = r.get("exceptionDetails") {
            panic!("evaluating {expr:?} threw: {ex}");
        }
        r["result"]["value"].clone()
    }

    /// Evaluates `expr` until it returns something other than null / false
    /// (the page renders asynchronously), at most `secs` seconds.
    pub fn wait_for(&mut self, secs: u64, expr: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let v = self.eval(expr);
            if !(v.is_null() || v == json!(false)) {
                return v;
            }
            if Instant::now() > deadline {
                let body = self.eval("document.getElementById('main')?.innerText?.slice(0, 2000)");
                panic!(
                    "timed out waiting for {expr:?}; page shows:\n{body}\nerrors: {:?}",
                    self.errors
                );
            }
            // Poll the page again after a frame or two.
            self.eval("new Promise(r => setTimeout(r, 50))");
        }
    }

    /// A left click at client coordinates, as a user's mouse makes it.
    pub fn click(&mut self, x: f64, y: f64) {
        for (kind, buttons) in [("mouseMoved", 0), ("mousePressed", 1), ("mouseReleased", 0)] {
            self.cmd(
                "Input.dispatchMouseEvent",
                json!({ "type": kind, "x": x, "y": y, "button": "left", "buttons": buttons, "clickCount": 1 }),
            );
        }
    }

    /// A PNG of the whole page (beyond the viewport).
    pub fn screenshot(&mut self, path: &Path) {
        let r = self.cmd(
            "Page.captureScreenshot",
            json!({ "format": "png", "captureBeyondViewport": true }),
        );
        let png = base64_decode(r["data"].as_str().expect("screenshot data"));
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("screenshot dir");
        }
        std::fs::write(path, png).expect("write screenshot");
    }
}

impl Page<'_> {
    /// A PNG of the element `selector` matches.
    pub fn screenshot_element(&mut self, selector: &str, path: &Path) {
        let rect = self.eval(&format!(
            "(() => {{ const r = document.querySelector({selector:?}).getBoundingClientRect(); \
                 return {{ x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height, scale: 1 }}; }})()"
        ));
        let r = self.cmd(
            "Page.captureScreenshot",
            json!({ "format": "png", "captureBeyondViewport": true, "clip": rect }),
        );
        let png = base64_decode(r["data"].as_str().expect("screenshot data"));
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::write(path, png).expect("write screenshot");
    }
}

/// Standard base64 (CDP's screenshot encoding).
fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let bytes: Vec<u8> = s
        .bytes()
        .filter(|c| *c != b'=' && !c.is_ascii_whitespace())
        .collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut acc = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            acc |= val(*c) << (18 - 6 * i);
        }
        let n = chunk.len() * 6 / 8;
        out.extend_from_slice(&acc.to_be_bytes()[1..1 + n]);
    }
    out
}

#[test]
fn base64_decodes_padded_and_unpadded() {
    assert_eq!(base64_decode("aGVsbG8="), b"hello");
    assert_eq!(base64_decode("aGk="), b"hi");
    assert_eq!(base64_decode("YWJj"), b"abc");
}
