//! `tiletune remote` end to end from the x86 host against fake devices
//! (`tests/fake-device/`): a fake `adb` and a fake `ssh` that run the pushed
//! static aarch64 build under qemu-aarch64 in a device root made from the
//! ARM dumps of `soc/tests/fixtures`. The host binary, its device lookup,
//! the push cache, the streamed run, the dropped connection, the merge into
//! the host table and `plan --soc` are the real ones.
//!
//! Gated on `TILETUNE_DEVICE_BIN`, the static aarch64 build to push
//! (`scripts/test` builds it and sets the variable); without it the tests
//! report a skip. They spawn processes, so under qemu they skip too.

#[path = "support/script.rs"]
mod script;
#[path = "support/tiny_gguf.rs"]
mod tiny_gguf;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const TARGET: &str = "aarch64-unknown-linux-musl";

/// The static device build, or `None` (with the reason printed) when the
/// tests cannot run here.
fn device_bin() -> Option<PathBuf> {
    if std::env::var_os("QEMU_CPU").is_some() {
        eprintln!("skipped under qemu-user: cannot spawn the host binary");
        return None;
    }
    match std::env::var_os("TILETUNE_DEVICE_BIN") {
        Some(p) => {
            let p = PathBuf::from(p);
            assert!(
                p.is_file(),
                "TILETUNE_DEVICE_BIN={} is no file",
                p.display()
            );
            Some(p)
        }
        None => {
            eprintln!(
                "skipped: set TILETUNE_DEVICE_BIN to the {TARGET} build (scripts/build-device)"
            );
            None
        }
    }
}

fn fake_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake-device")
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// How a fake device is set up.
struct Spec<'a> {
    /// A folder of `soc/tests/fixtures`.
    dump: &'a str,
    qemu_cpu: &'a str,
    /// `Some(sdk)`: Android (getprop answers).
    android: Option<u32>,
    paranoid: i32,
    perf_harden: &'a str,
    /// Hottest thermal zone, m°C.
    temp_milli: i64,
}

const PHONE: Spec = Spec {
    dump: "arm-sm8550",
    qemu_cpu: "cortex-a76",
    android: Some(34),
    paranoid: 1,
    perf_harden: "0",
    temp_milli: 38_500,
};

/// Makes device `name` under `home` (see tests/fake-device/README.md).
fn device(home: &Path, name: &str, s: &Spec) -> PathBuf {
    let d = home.join(name);
    let root = d.join("root");
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("soc/tests/fixtures")
            .join(s.dump),
        &root,
    );
    std::fs::create_dir_all(root.join("data/local/tmp")).unwrap();
    std::fs::create_dir_all(root.join("home")).unwrap();
    std::fs::create_dir_all(root.join("proc/sys/kernel")).unwrap();
    std::fs::write(
        root.join("proc/sys/kernel/perf_event_paranoid"),
        format!("{}\n", s.paranoid),
    )
    .unwrap();
    for (i, (kind, t)) in [("battery", 31_000), ("cpu-1-0-usr", s.temp_milli)]
        .into_iter()
        .enumerate()
    {
        let z = root.join(format!("sys/class/thermal/thermal_zone{i}"));
        std::fs::create_dir_all(&z).unwrap();
        std::fs::write(z.join("type"), format!("{kind}\n")).unwrap();
        std::fs::write(z.join("temp"), format!("{t}\n")).unwrap();
    }
    std::fs::write(
        d.join("env"),
        format!("QEMU_CPU={}\nFAKE_ARCH=aarch64\n", s.qemu_cpu),
    )
    .unwrap();
    if let Some(sdk) = s.android {
        std::fs::write(
            d.join("props"),
            format!(
                "ro.build.version.sdk={sdk}\nsecurity.perf_harden={}\n\
                 fake.wakefulness=Awake\nfake.deep_idle=ACTIVE\n",
                s.perf_harden
            ),
        )
        .unwrap();
    }
    d
}

/// The host side of a test: the host table, the fake homes, the device
/// build where the default lookup finds it by the device's architecture.
struct Host {
    dir: tempfile::TempDir,
    bin_dir: PathBuf,
}

impl Host {
    fn new(bin: &Path) -> Host {
        let dir = tempfile::tempdir().unwrap();
        let bin_dir = dir.path().join("device-bins");
        std::fs::create_dir_all(bin_dir.join(TARGET)).unwrap();
        std::fs::copy(bin, bin_dir.join(TARGET).join("tiletune")).unwrap();
        std::fs::create_dir_all(dir.path().join("adb")).unwrap();
        std::fs::create_dir_all(dir.path().join("ssh")).unwrap();
        Host { dir, bin_dir }
    }

    fn adb_home(&self) -> PathBuf {
        self.dir.path().join("adb")
    }

    fn ssh_home(&self) -> PathBuf {
        self.dir.path().join("ssh")
    }

    fn db(&self) -> String {
        self.dir
            .path()
            .join("host.db")
            .to_str()
            .unwrap()
            .to_string()
    }

    fn tiletune(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_tiletune"))
            .args(args)
            .env("ADB", fake_dir().join("adb"))
            .env("TILETUNE_SSH", fake_dir().join("ssh"))
            .env("FAKE_ADB_HOME", self.adb_home())
            .env("FAKE_SSH_HOME", self.ssh_home())
            .env("TILETUNE_DEVICE_BIN_DIR", &self.bin_dir)
            .env("TILETUNE_DB", self.db())
            .env_remove("QEMU_CPU")
            .output()
            .expect("the tiletune binary runs")
    }
}

fn ok(out: &Output) -> (String, String) {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "status {:?}\nstderr: {stderr}",
        out.status
    );
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// The fingerprint the device build computes for itself on device `d`,
/// asked directly under qemu (not through `remote`).
fn own_fingerprint(bin: &Path, d: &Path, cpu: &str) -> (String, String) {
    let out = Command::new("qemu-aarch64")
        .arg(bin)
        .args(["--json", "probe"])
        .env("QEMU_CPU", cpu)
        .env("TILETUNE_SOC_ROOT", d.join("root"))
        .output()
        .expect("qemu-aarch64 runs");
    let (stdout, _) = ok(&out);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    (
        v["soc"]["fingerprint"].as_str().unwrap().to_string(),
        v["soc"]["name"].as_str().unwrap().to_string(),
    )
}

/// `problem|candidate` of every measurement of `fp` in the table at `db`,
/// read with the device build under qemu when `via` is given (the device's
/// own table), else with the host binary.
fn measurement_keys(db: &Path, fp: &str, via: Option<&Path>) -> Vec<String> {
    let file = db.with_extension(format!("{}.json", &fp[..8]));
    let args = [
        "table",
        "export",
        "--db",
        db.to_str().unwrap(),
        "--soc",
        fp,
        "--out",
        file.to_str().unwrap(),
    ];
    let out = match via {
        Some(bin) => Command::new("qemu-aarch64").arg(bin).args(args).output(),
        None => Command::new(env!("CARGO_BIN_EXE_tiletune"))
            .args(args)
            .output(),
    }
    .unwrap();
    ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    v["measurements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| format!("{}|{}", m["problem"], m["candidate"]))
        .collect()
}

/// The host table's export of `fp` (which fails when the SoC is not there).
fn host_export(db: &str, fp: &str) -> serde_json::Value {
    let file = format!("{db}.{fp}.json");
    ok(&Command::new(env!("CARGO_BIN_EXE_tiletune"))
        .args(["table", "export", "--db", db, "--soc", fp, "--out", &file])
        .output()
        .unwrap());
    serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap()
}

fn campaigns(db: &str, fp: &str) -> Vec<serde_json::Value> {
    host_export(db, fp)["campaigns"].as_array().unwrap().clone()
}

fn soc_name(db: &str, fp: &str) -> serde_json::Value {
    host_export(db, fp)["soc"]["name"].clone()
}

/// The issue's acceptance: from the host, `remote --adb tune --model M
/// --budget ...` on the 3-cluster phone dump fills host rows keyed by the
/// device's fingerprint, `plan --soc` shows them, and a connection dropped
/// mid-campaign resumes without losing or duplicating a row.
#[test]
fn remote_tune_over_adb_fills_the_host_table_and_survives_a_drop() {
    let Some(bin) = device_bin() else { return };
    let host = Host::new(&bin);
    let phone = device(&host.adb_home(), "R58M42", &PHONE);
    // Drop the connection once the second problem starts: the first
    // problem's measurements are then in the device table only.
    std::fs::write(phone.join("drop-on"), "[2/").unwrap();
    let model = tiny_gguf::tiny_model(host.dir.path());
    let db = host.db();

    let out = host.tiletune(&[
        "remote",
        "--adb",
        "tune",
        "--model",
        model.to_str().unwrap(),
        "--quick",
        "--budget",
        "10s",
        "-t",
        "2",
        "--workload",
        "pp16,tg8",
    ]);
    let (stdout, stderr) = ok(&out);
    let (fp, name) = own_fingerprint(&bin, &phone, PHONE.qemu_cpu);
    assert!(name.contains("SM8550"), "{name}");
    assert!(stderr.contains(&format!("fingerprint {fp}")), "{stderr}");
    assert!(stderr.contains("2 pushed, 0 already there"), "{stderr}");
    assert!(stderr.contains("the connection dropped"), "{stderr}");
    assert!(stderr.contains("resuming campaign"), "{stderr}");
    assert!(
        stderr.contains("resumed after 1 dropped connection(s)"),
        "{stderr}"
    );
    // Placements on CPUs the emulated device cannot use are left out, said once each.
    assert!(stderr.contains("left out: cpus 3-4"), "{stderr}");
    assert!(
        stdout.contains("joint layout choice for pp16,tg8"),
        "{stdout}"
    );
    assert!(!phone.join("drop-on").exists(), "the drop fired");

    // Nothing lost, nothing duplicated: the host holds exactly the device
    // table's measurements (as `table import` of its export admits them: the
    // same screening), of one campaign (the resumed one), under its
    // fingerprint.
    let device_db = phone.join("root/data/local/tmp/tiletune/selector.db");
    let all_on_device = measurement_keys(&device_db, &fp, Some(&bin));
    let by_hand = host.dir.path().join("by-hand.db");
    let (_, imported) = ok(&host.tiletune(&[
        "table",
        "import",
        "--db",
        by_hand.to_str().unwrap(),
        device_db
            .with_extension(format!("{}.json", &fp[..8]))
            .to_str()
            .unwrap(),
    ]));
    let on_device = measurement_keys(&by_hand, &fp, None);
    assert!(on_device.len() <= all_on_device.len(), "{imported}");
    let on_host = measurement_keys(Path::new(&db), &fp, None);
    assert!(!on_host.is_empty());
    let unique: HashSet<&String> = on_host.iter().collect();
    assert_eq!(unique.len(), on_host.len(), "duplicated rows");
    let device: HashSet<&String> = on_device.iter().collect();
    let lost: Vec<&&String> = device.difference(&unique).collect();
    let extra: Vec<&&String> = unique.difference(&device).collect();
    assert!(
        lost.is_empty() && extra.is_empty(),
        "{} of the device's {} rows not on the host: {lost:?}\n{} host rows not on the device: {extra:?}",
        lost.len(),
        device.len(),
        extra.len()
    );
    let c = campaigns(&db, &fp);
    assert_eq!(c.len(), 1, "{c:?}");
    let flags = c[0]["drift_flags"].to_string();
    assert!(
        flags.contains("thermal on adb:R58M42: hottest zone 38.5 °C"),
        "{flags}"
    );

    // The host shows the phone's winners and builds the phone's plan.
    let (show, _) = ok(&host.tiletune(&["--json", "table", "show", "--soc", &fp]));
    let show: serde_json::Value = serde_json::from_str(&show).unwrap();
    assert!(!show["selections"].as_array().unwrap().is_empty(), "{show}");
    let (plan, _) = ok(&host.tiletune(&[
        "plan",
        "--soc",
        &fp[..12],
        "--model",
        model.to_str().unwrap(),
        "-t",
        "2",
    ]));
    assert!(plan.contains(&format!("plan for soc {fp}")), "{plan}");
    assert!(plan.contains("tuned"), "{plan}");
    let (here, _) = ok(&host.tiletune(&["plan", "--model", model.to_str().unwrap(), "-t", "2"]));
    assert!(!here.contains("plan for soc"), "{here}");

    // The phone's rows travel as a read-only asset named by its
    // fingerprint, found with no table named.
    let assets = host.dir.path().join("assets");
    std::fs::create_dir_all(&assets).unwrap();
    let export = host.dir.path().join("phone.json");
    ok(&host.tiletune(&[
        "table",
        "export",
        "--soc",
        &fp,
        "--out",
        export.to_str().unwrap(),
    ]));
    let asset = assets.join(format!("{fp}.db"));
    ok(&host.tiletune(&[
        "table",
        "import",
        "--db",
        asset.to_str().unwrap(),
        export.to_str().unwrap(),
    ]));
    let out = Command::new(env!("CARGO_BIN_EXE_tiletune"))
        .args([
            "plan",
            "--soc",
            &fp,
            "--model",
            model.to_str().unwrap(),
            "-t",
            "2",
        ])
        .env_remove("TILETUNE_DB")
        .env("XDG_DATA_HOME", host.dir.path().join("empty-xdg"))
        .env("TILETUNE_TABLE_DIR", &assets)
        .output()
        .unwrap();
    let (from_asset, _) = ok(&out);
    assert!(from_asset.contains(asset.to_str().unwrap()), "{from_asset}");
    assert!(from_asset.contains("tuned"), "{from_asset}");

    // The build is not pushed again, and no row is added twice.
    let (_, again) = ok(&host.tiletune(&["remote", "--adb", "R58M42", "probe"]));
    assert!(again.contains("0 pushed, 1 already there"), "{again}");
    assert!(again.contains("0 new measurement(s)"), "{again}");
    assert_eq!(
        measurement_keys(Path::new(&db), &fp, None).len(),
        on_host.len()
    );
}

/// A phone whose counters are refused (perf_event_paranoid 3 and
/// security.perf_harden 1, as Android ships), with its screen off and hot:
/// the probe still runs and the user is told what to do about each.
#[test]
fn a_refusing_hot_sleeping_phone_is_explained() {
    let Some(bin) = device_bin() else { return };
    let host = Host::new(&bin);
    let phone = device(
        &host.adb_home(),
        "ZY22",
        &Spec {
            paranoid: 3,
            perf_harden: "1",
            temp_milli: 81_000,
            ..PHONE
        },
    );
    let props = std::fs::read_to_string(phone.join("props"))
        .unwrap()
        .replace("fake.wakefulness=Awake", "fake.wakefulness=Asleep");
    std::fs::write(phone.join("props"), props).unwrap();
    let (stdout, stderr) = ok(&host.tiletune(&["--json", "remote", "--adb", "probe"]));
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("the device's JSON");
    assert_eq!(v["pmu"]["available"], false, "{v}");
    assert!(
        stderr.contains("hardware counters are unavailable"),
        "{stderr}"
    );
    assert!(stderr.contains("adb root"), "{stderr}");
    assert!(
        stderr.contains("setprop security.perf_harden 0"),
        "{stderr}"
    );
    assert!(stderr.contains("the screen is off (Asleep)"), "{stderr}");
    assert!(stderr.contains("was hot"), "{stderr}");
    // The phone is registered on the host with its probe record.
    let (fp, _) = own_fingerprint(&bin, &phone, PHONE.qemu_cpu);
    assert_eq!(soc_name(&host.db(), &fp), v["soc"]["name"]);
}

/// `--adb all` runs on every device in turn, each into its own SoC's rows;
/// `--ssh` reaches a board the same way.
#[test]
fn every_device_and_an_ssh_board_get_their_own_rows() {
    let Some(bin) = device_bin() else { return };
    let host = Host::new(&bin);
    let a = device(&host.adb_home(), "PHONE1", &PHONE);
    let b = device(
        &host.adb_home(),
        "PHONE2",
        &Spec {
            dump: "arm-rpi5",
            qemu_cpu: "cortex-a53",
            ..PHONE
        },
    );
    let board = device(
        &host.ssh_home(),
        "board",
        &Spec {
            dump: "arm-graviton3",
            qemu_cpu: "max",
            android: None,
            ..PHONE
        },
    );
    let (_, stderr) = ok(&host.tiletune(&["remote", "--adb", "all", "probe"]));
    let (_, ssh) = ok(&host.tiletune(&["remote", "--ssh", "pi@board:2222", "probe"]));
    let fps = [
        own_fingerprint(&bin, &a, "cortex-a76").0,
        own_fingerprint(&bin, &b, "cortex-a53").0,
        own_fingerprint(&bin, &board, "max").0,
    ];
    assert!(stderr.contains("adb:PHONE1: "), "{stderr}");
    assert!(
        stderr.contains(&format!("fingerprint {}", fps[0])),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("fingerprint {}", fps[1])),
        "{stderr}"
    );
    assert!(ssh.contains("ssh:pi@board:2222: "), "{ssh}");
    assert!(ssh.contains(&format!("fingerprint {}", fps[2])), "{ssh}");
    // Over ssh the work directory is under the login's home.
    assert!(board.join("root/home/.cache/tiletune-remote/bin").is_dir());
    assert_eq!(fps.iter().collect::<HashSet<_>>().len(), 3, "{fps:?}");
    for fp in &fps {
        assert!(
            soc_name(&host.db(), fp).is_string(),
            "{fp} not in the host table"
        );
    }
}

/// What a user gets wrong, or a device lacks, is a clear error.
#[test]
fn a_full_device_and_bad_input_are_clear_errors() {
    let Some(bin) = device_bin() else { return };
    let host = Host::new(&bin);
    let phone = device(&host.adb_home(), "FULL", &PHONE);
    std::fs::write(phone.join("free-kib"), "1024").unwrap();
    let out = host.tiletune(&["remote", "--adb", "probe"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("1 MiB free") && e.contains("--device-dir"),
        "{e}"
    );
    for (args, says) in [
        (vec!["remote", "--adb", "chat"], "chat"),
        (
            vec!["remote", "--ssh", "pi@board:0", "probe"],
            "[USER@]HOST[:PORT]",
        ),
        (vec!["remote", "probe"], "--adb"),
        (vec!["remote", "--adb", "NOPE", "probe"], "not found"),
    ] {
        let out = host.tiletune(&args);
        assert!(!out.status.success(), "{args:?}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains(says), "{args:?}: {e}");
    }
}

/// `remote run` streams what the device prints byte for byte (the exit
/// marker cut, the generated text's missing final newline kept), and the
/// model pushed once is found by content the second time.
#[test]
fn remote_run_streams_the_device_output_unchanged() {
    let Some(bin) = device_bin() else { return };
    let host = Host::new(&bin);
    let phone = device(&host.adb_home(), "RUN1", &PHONE);
    let model = tiny_gguf::tiny_model(host.dir.path());
    let run = [
        "run",
        "--model",
        model.to_str().unwrap(),
        "--prompt",
        "abc ab",
        "-n",
        "5",
        "--temp",
        "0",
    ];
    let mut args = vec!["remote", "--adb", "RUN1"];
    args.extend(run);
    let (remote, stderr) = ok(&host.tiletune(&args));
    assert!(stderr.contains("2 pushed, 0 already there"), "{stderr}");
    assert!(
        stderr.contains("tok/s"),
        "the device's stderr streams: {stderr}"
    );
    let direct = Command::new("qemu-aarch64")
        .arg(&bin)
        .args(run)
        .env("QEMU_CPU", PHONE.qemu_cpu)
        .env("TILETUNE_SOC_ROOT", phone.join("root"))
        .env("TILETUNE_DB", host.dir.path().join("none.db"))
        .output()
        .unwrap();
    let (direct, _) = ok(&direct);
    assert!(!direct.trim().is_empty());
    assert_eq!(remote, direct, "the generated text, byte for byte");
    let (_, again) = ok(&host.tiletune(&args));
    assert!(again.contains("0 pushed, 2 already there"), "{again}");
}

/// `remote compare` pushes the user's ARM peer (`--llama-bench`) with the
/// model and runs it on the device beside tiletune's own bench: the peer
/// here is a script that answers as llama-bench does, naming the machine it
/// ran on (`uname -m` answers for the device) in its build commit.
///
/// Under qemu-user a process cannot start another aarch64 program (no
/// binfmt handler here), so the device build's own `bench model` child fails
/// to start on the fake device; on a phone it runs. The test holds the
/// peer's row and that the own engine was started on the device's paths.
#[test]
fn remote_compare_runs_the_pushed_peer_on_the_device() {
    let Some(bin) = device_bin() else { return };
    let host = Host::new(&bin);
    let phone = device(&host.adb_home(), "CMP1", &PHONE);
    let model = tiny_gguf::tiny_model(host.dir.path());
    let peer = script::script(
        host.dir.path(),
        "llama-bench",
        r#"# Answers `-p 8 -n 0 -t 1 -r 1 -o json` as llama-bench would.
case " $* " in *" -p 8 "*" -t 1 "*" -o json "*) ;; *) echo "unexpected: $*" >&2; exit 2;; esac
cat <<JSON
[{"build_commit": "on-$(uname -m)", "build_number": 1, "model_filename": "m.gguf",
  "model_type": "llama ?B F32", "n_threads": 1, "n_prompt": 8, "n_gen": 0,
  "avg_ts": 123.5, "stddev_ts": 0.0, "samples_ts": [123.5]}]
JSON"#,
    );
    let out = host.tiletune(&[
        "remote",
        "--adb",
        "compare",
        "-m",
        model.to_str().unwrap(),
        "--llama-bench",
        peer.to_str().unwrap(),
        "-p",
        "8",
        "-n",
        "0",
        "-t",
        "1",
        "-r",
        "1",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("3 pushed, 0 already there"), "{stderr}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("llama.cpp"))
        .unwrap_or_else(|| panic!("no llama.cpp row: {stdout}\n{stderr}"));
    assert!(
        row.contains("on-aarch64"),
        "the peer ran on the device: {row}"
    );
    assert!(row.contains("123.50") && row.contains("pp8"), "{row}");
    assert!(
        stdout.contains("data/local/tmp/tiletune/bin/") && stdout.contains("bench model --model"),
        "tiletune's own engine started from the pushed build: {stdout}"
    );
    // The peer's result reached the host table under the phone's fingerprint.
    let (fp, _) = own_fingerprint(&bin, &phone, PHONE.qemu_cpu);
    let peers = host_export(&host.db(), &fp)["peer_results"].clone();
    let peers = peers.as_array().expect("peer_results");
    assert!(
        peers
            .iter()
            .any(|p| p["engine"] == "llama.cpp" && p["test"] == "pp8"),
        "{peers:?}"
    );
}
