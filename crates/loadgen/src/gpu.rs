//! GPU telemetry beside the server's: `nvidia-smi` streaming one CSV line per GPU per second,
//! or a DCGM exporter's Prometheus endpoint polled like the server's `/metrics`. Each reading
//! is stamped when the client receives it and placed on the run's clock afterwards, so GPU
//! series, server gauges and request records share one time axis.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::RunClock;
use crate::target::{ApiKind, Target};
use crate::telemetry::prometheus_samples;
use crate::LoadgenError;

pub use servebench_metrics::result::{GpuSample, GpuSeries, GpuTelemetry, NO_GPU_TELEMETRY};

/// The `nvidia-smi` query: its columns in the order [`parse_nvidia_smi_line`] reads them.
pub const NVIDIA_SMI_QUERY: &str = "index,utilization.gpu,memory.used,power.draw,clocks.sm";

/// How long `finish` waits for the `nvidia-smi` reader after stopping it.
const READER_GRACE: Duration = Duration::from_secs(2);

/// DCGM exporter fields read, by meaning.
const DCGM_UTIL: &str = "DCGM_FI_DEV_GPU_UTIL";
const DCGM_FB_USED: &str = "DCGM_FI_DEV_FB_USED";
const DCGM_POWER: &str = "DCGM_FI_DEV_POWER_USAGE";
const DCGM_SM_CLOCK: &str = "DCGM_FI_DEV_SM_CLOCK";

/// Where GPU readings come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuSource {
    /// `nvidia-smi` at this path, streaming with `-lms`.
    NvidiaSmi(PathBuf),
    /// A DCGM exporter's metrics URL (`http://host:9400/metrics`).
    Dcgm(String),
}

impl GpuSource {
    /// `--gpu-metrics-url` when given (checked to be a plain `http://` URL), else `nvidia-smi`
    /// when it is on `PATH`, else none.
    pub fn detect(dcgm_url: Option<&str>) -> Result<Option<GpuSource>, LoadgenError> {
        if let Some(url) = dcgm_url {
            split_url(url)?;
            return Ok(Some(GpuSource::Dcgm(url.to_owned())));
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        Ok(std::env::split_paths(&path)
            .map(|dir| dir.join("nvidia-smi"))
            .find(|p| is_executable(p))
            .map(GpuSource::NvidiaSmi))
    }

    fn describe(&self) -> String {
        match self {
            GpuSource::NvidiaSmi(_) => "nvidia-smi".into(),
            GpuSource::Dcgm(url) => format!("dcgm {}", crate::target::redact_url(url)),
        }
    }
}

fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

/// `(http://host:port, /path)` of a metrics URL.
fn split_url(url: &str) -> Result<(String, String), LoadgenError> {
    let uri = crate::target::parse_uri(url)
        .map_err(|e| LoadgenError::Config(format!("--gpu-metrics-url: {e}")))?;
    let authority = uri.authority().ok_or_else(|| {
        LoadgenError::Config(format!(
            "--gpu-metrics-url {}: no host",
            crate::target::redact_url(url)
        ))
    })?;
    let path = uri
        .path_and_query()
        .map(|p| p.as_str())
        .filter(|p| !p.is_empty() && *p != "/")
        .unwrap_or("/metrics");
    Ok((format!("http://{authority}"), path.to_owned()))
}

/// One GPU's reading, before it is placed on the run's clock.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuReading {
    pub gpu: String,
    pub util_percent: Option<f64>,
    pub memory_used_mib: Option<f64>,
    pub power_w: Option<f64>,
    pub sm_clock_mhz: Option<f64>,
}

/// One line of `nvidia-smi --query-gpu=index,utilization.gpu,memory.used,power.draw,clocks.sm
/// --format=csv,noheader,nounits`: `0, 87, 40123, 312.45, 1980`. A field `nvidia-smi` cannot
/// read (`[N/A]`, `[Not Supported]`) is `None`; a line that is not five fields with an index
/// and at least one number is `None` (counted as unreadable by the caller).
pub fn parse_nvidia_smi_line(line: &str) -> Option<GpuReading> {
    let fields: Vec<&str> = line.trim().split(',').map(str::trim).collect();
    let [index, util, mem, power, clock] = fields[..] else {
        return None;
    };
    if index.is_empty() || !index.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let num = |s: &str| s.parse::<f64>().ok().filter(|v| v.is_finite());
    let r = GpuReading {
        gpu: index.to_owned(),
        util_percent: num(util),
        memory_used_mib: num(mem),
        power_w: num(power),
        sm_clock_mhz: num(clock),
    };
    let unreadable = |s: &str| s.starts_with('[') && s.ends_with(']');
    let all_fields_understood = [util, mem, power, clock]
        .iter()
        .all(|s| num(s).is_some() || unreadable(s));
    let any = r.util_percent.is_some()
        || r.memory_used_mib.is_some()
        || r.power_w.is_some()
        || r.sm_clock_mhz.is_some();
    (all_fields_understood && any).then_some(r)
}

/// A DCGM exporter's answer: one reading per `gpu` label that has any of the four fields.
pub fn parse_dcgm(text: &str) -> Vec<GpuReading> {
    let mut by_gpu: BTreeMap<String, GpuReading> = BTreeMap::new();
    for s in prometheus_samples(text) {
        let slot = match s.name {
            DCGM_UTIL | DCGM_FB_USED | DCGM_POWER | DCGM_SM_CLOCK => s.name,
            _ => continue,
        };
        let Some(gpu) = s.label("gpu") else { continue };
        let r = by_gpu.entry(gpu.to_owned()).or_insert_with(|| GpuReading {
            gpu: gpu.to_owned(),
            ..GpuReading::default()
        });
        let v = Some(s.value).filter(|v| v.is_finite());
        match slot {
            DCGM_UTIL => r.util_percent = v,
            DCGM_FB_USED => r.memory_used_mib = v,
            DCGM_POWER => r.power_w = v,
            _ => r.sm_clock_mhz = v,
        }
    }
    by_gpu.into_values().collect()
}

/// What a sampler gathered, readings stamped on the monotonic clock.
#[derive(Debug, Default)]
struct Gathered {
    readings: Vec<(Instant, GpuReading)>,
    bad: u64,
    ended_early: Option<String>,
}

enum Running {
    Smi {
        child: Child,
        reader: std::thread::JoinHandle<()>,
        gathered: Arc<Mutex<Gathered>>,
    },
    Dcgm {
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<Gathered>,
    },
    Failed(String),
}

/// A background GPU sampler; `finish` stops it and returns the series on the run's clock.
pub struct GpuSampler {
    source: String,
    running: Running,
}

impl std::fmt::Debug for GpuSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuSampler")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl GpuSampler {
    /// Start reading `source` every `every` (nvidia-smi's `-lms`, or the exporter's poll).
    pub fn start(source: &GpuSource, every: Duration) -> Self {
        let running = match source {
            GpuSource::NvidiaSmi(program) => start_smi(program, every),
            GpuSource::Dcgm(url) => start_dcgm(url, every),
        };
        GpuSampler {
            source: source.describe(),
            running,
        }
    }

    /// Stop the source and return its readings from `clock`'s time zero on (earlier readings
    /// belong to the preparation, not the run).
    pub async fn finish(self, clock: RunClock) -> GpuTelemetry {
        let gathered = match self.running {
            Running::Smi {
                mut child,
                reader,
                gathered,
            } => {
                let ended = match child.try_wait() {
                    Ok(Some(status)) => {
                        Some(format!("nvidia-smi exited during the run ({status})"))
                    }
                    _ => None,
                };
                // Killing it closes its stdout, which ends the reader thread, unless a process
                // it started holds the pipe: then the lines read so far are taken after a
                // short wait and the thread is left to end with the pipe.
                let _ = child.kill();
                let _ = child.wait();
                let deadline = Instant::now() + READER_GRACE;
                while !reader.is_finished() && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                let mut g = match gathered.lock() {
                    Ok(mut g) => std::mem::take(&mut *g),
                    Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
                };
                g.ended_early = ended;
                g
            }
            Running::Dcgm { stop, task } => {
                let _ = stop.send(());
                task.await.unwrap_or_default()
            }
            Running::Failed(why) => Gathered {
                ended_early: Some(why),
                ..Gathered::default()
            },
        };
        let mut series: BTreeMap<String, Vec<GpuSample>> = BTreeMap::new();
        for (at, r) in gathered.readings {
            if at < clock.start() {
                continue;
            }
            series.entry(r.gpu).or_default().push(GpuSample {
                t: clock.ns_at(at),
                util_percent: r.util_percent,
                memory_used_mib: r.memory_used_mib,
                power_w: r.power_w,
                sm_clock_mhz: r.sm_clock_mhz,
            });
        }
        let mut gpus: Vec<GpuSeries> = series
            .into_iter()
            .map(|(gpu, samples)| GpuSeries { gpu, samples })
            .collect();
        gpus.sort_by_key(|g| (g.gpu.parse::<u64>().unwrap_or(u64::MAX), g.gpu.clone()));
        GpuTelemetry {
            source: self.source,
            note: None,
            gpus,
            bad_readings: gathered.bad,
            ended_early: gathered.ended_early,
        }
    }
}

fn start_smi(program: &Path, every: Duration) -> Running {
    let ms = every.as_millis().max(1).to_string();
    let spawned = Command::new(program)
        .arg(format!("--query-gpu={NVIDIA_SMI_QUERY}"))
        .args(["--format=csv,noheader,nounits", "-lms", &ms])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return Running::Failed(format!("could not start nvidia-smi: {e}")),
    };
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        let _ = child.wait();
        return Running::Failed("nvidia-smi gave no output pipe".into());
    };
    // A thread of its own: the pipe is read as lines arrive, each stamped on arrival, and
    // no async runtime feature is needed for a child process.
    let gathered = Arc::new(Mutex::new(Gathered::default()));
    let shared = Arc::clone(&gathered);
    let reader = std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match lines.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let at = Instant::from_std(std::time::Instant::now());
            let line = String::from_utf8_lossy(&buf);
            if line.trim().is_empty() {
                continue;
            }
            let Ok(mut g) = shared.lock() else { break };
            match parse_nvidia_smi_line(&line) {
                Some(r) => g.readings.push((at, r)),
                None => g.bad += 1,
            }
        }
    });
    Running::Smi {
        child,
        reader,
        gathered,
    }
}

fn start_dcgm(url: &str, every: Duration) -> Running {
    let (base_url, path) = match split_url(url) {
        Ok(x) => x,
        Err(e) => return Running::Failed(e.to_string()),
    };
    let target = Target {
        base_url,
        endpoint: path.clone(),
        api: ApiKind::Completions,
        model: String::new(),
        headers: Vec::new(),
        api_key: None,
        extra_body: serde_json::Map::new(),
        ignore_eos: false,
        transport: Default::default(),
    };
    let (stop, mut stopped) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut g = Gathered::default();
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let last_round = tokio::select! {
                _ = &mut stopped => true,
                _ = ticker.tick() => false,
            };
            let got =
                crate::probe::get_text(&target, &path, every.max(Duration::from_secs(2))).await;
            let at = Instant::now();
            match got.map(|text| parse_dcgm(&text)) {
                Ok(readings) if !readings.is_empty() => {
                    g.readings.extend(readings.into_iter().map(|r| (at, r)));
                }
                _ => g.bad += 1,
            }
            if last_round {
                break;
            }
        }
        g
    });
    Running::Dcgm { stop, task }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_smi_lines_parse_and_garbage_is_refused() {
        let r = parse_nvidia_smi_line("0, 87, 40123, 312.45, 1980\n").unwrap();
        assert_eq!(r.gpu, "0");
        assert_eq!(r.util_percent, Some(87.0));
        assert_eq!(r.memory_used_mib, Some(40123.0));
        assert_eq!(r.power_w, Some(312.45));
        assert_eq!(r.sm_clock_mhz, Some(1980.0));
        let na = parse_nvidia_smi_line("3, 12, 512, [N/A], [Not Supported]").unwrap();
        assert_eq!(na.gpu, "3");
        assert_eq!(na.power_w, None);
        for bad in [
            "",
            "garbage",
            "0, 87, 40123, 312.45",
            "0, 87, 40123, 312.45, 1980, 7",
            "x, 87, 40123, 312.45, 1980",
            "0, lots, 40123, 312.45, 1980",
            "1, [N/A], [N/A], [N/A], [N/A]",
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
        ] {
            assert_eq!(parse_nvidia_smi_line(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn dcgm_readings_are_grouped_by_gpu_label() {
        let text = "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n\
            # TYPE DCGM_FI_DEV_GPU_UTIL gauge\n\
            DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\",device=\"nvidia0\"} 91\n\
            DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-b\",device=\"nvidia1\"} 15\n\
            DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-a\"} 70000\n\
            DCGM_FI_DEV_POWER_USAGE{gpu=\"1\",UUID=\"GPU-b\"} 120.5\n\
            DCGM_FI_DEV_SM_CLOCK{gpu=\"0\",UUID=\"GPU-a\"} 1755\n\
            DCGM_FI_DEV_MEM_CLOCK{gpu=\"0\",UUID=\"GPU-a\"} 2619\n\
            DCGM_FI_DEV_GPU_TEMP{UUID=\"GPU-a\"} 60\n";
        let r = parse_dcgm(text);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].gpu, "0");
        assert_eq!(r[0].util_percent, Some(91.0));
        assert_eq!(r[0].memory_used_mib, Some(70000.0));
        assert_eq!(r[0].sm_clock_mhz, Some(1755.0));
        assert_eq!(r[0].power_w, None);
        assert_eq!(r[1].power_w, Some(120.5));
        assert!(parse_dcgm("not prometheus at all").is_empty());
    }

    #[test]
    fn metrics_urls_default_their_path_and_refuse_other_schemes() {
        assert_eq!(
            split_url("http://10.0.0.5:9400").unwrap(),
            ("http://10.0.0.5:9400".into(), "/metrics".into())
        );
        assert_eq!(
            split_url("http://h:9400/custom").unwrap().1,
            "/custom".to_owned()
        );
        assert!(split_url("ftp://h/metrics").is_err());
        assert!(split_url("not a url").is_err());
    }
}
