//! The bandwidth floor of hardware outside the catalog, from three numbers: peak memory
//! bandwidth, parameter count and bytes per parameter.

use serde::Serialize;

use crate::{AnalysisError, Explained};

/// Hardware and model known only by their headline numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RawHardware {
    /// Where the bandwidth came from (`--bandwidth-gbs`, or a catalog GPU's id).
    pub source: String,
    /// Peak memory bandwidth of one GPU, B/s.
    pub peak_bandwidth: f64,
    /// Memory-bandwidth utilisation a decode step reaches.
    pub mbu: f64,
    /// Whether `mbu` is a default rather than a property of this GPU.
    pub mbu_assumed: bool,
    /// Model parameters, all of them (embedding tables included).
    pub params: f64,
    /// Bytes per parameter (2 for BF16, 1 for FP8, 0.5 for 4-bit).
    pub bytes_per_param: f64,
    /// GPUs the weights are split over.
    pub tensor_parallel_size: u32,
}

/// The figures three numbers support.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RawPrediction {
    /// The inputs.
    pub hardware: RawHardware,
    /// `params · bytes_per_param / tp`, per GPU.
    pub weights: Explained,
    /// `weights / peak_BW`: the fastest a decode step can stream the weights.
    pub floor: Explained,
    /// `1 / floor`: an upper bound on single-stream decode tok/s.
    pub max_tokens_per_s: Explained,
    /// `weights / (peak_BW · MBU)`: the streaming time at a realistic utilisation.
    pub expected_tpot: Explained,
    /// `1 / expected_tpot`.
    pub expected_tokens_per_s: Explained,
    /// What these figures leave out.
    pub notes: Vec<String>,
}

/// Predicts weight bytes and the bandwidth floor from headline numbers.
pub fn predict_raw(hw: &RawHardware) -> Result<RawPrediction, AnalysisError> {
    for (name, v) in [
        ("bandwidth", hw.peak_bandwidth),
        ("params", hw.params),
        ("bytes per param", hw.bytes_per_param),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(AnalysisError::Invalid(format!(
                "{name} must be a positive number, got {v}"
            )));
        }
    }
    if !(hw.mbu > 0.0 && hw.mbu <= 1.0) {
        return Err(AnalysisError::Invalid(format!(
            "mbu must be in (0, 1], got {}",
            hw.mbu
        )));
    }
    if hw.tensor_parallel_size == 0 {
        return Err(AnalysisError::Invalid(
            "tensor_parallel_size must be at least 1".into(),
        ));
    }
    let tp = f64::from(hw.tensor_parallel_size);
    let weights = Explained::new(
        hw.params * hw.bytes_per_param / tp,
        "B",
        "W = params · bytes_per_param / tp",
    )
    .with("params", hw.params, "params")
    .with("bytes_per_param", hw.bytes_per_param, "B")
    .with("tp", tp, "");
    let floor_s = weights.value / hw.peak_bandwidth;
    let floor = Explained::new(floor_s, "s", "W / peak_BW")
        .with("W", weights.value, "B")
        .with("peak_BW", hw.peak_bandwidth, "B/s");
    let max_tokens_per_s = Explained::new(1.0 / floor_s, "tok/s", "1 / (W / peak_BW)").with(
        "W / peak_BW",
        floor_s,
        "s",
    );
    let tpot_s = weights.value / (hw.peak_bandwidth * hw.mbu);
    let expected_tpot = Explained::new(tpot_s, "s", "W / (peak_BW · MBU)")
        .with("W", weights.value, "B")
        .with("peak_BW", hw.peak_bandwidth, "B/s")
        .with("MBU", hw.mbu, "");
    let expected_tokens_per_s =
        Explained::new(1.0 / tpot_s, "tok/s", "1 / expected TPOT").with("TPOT", tpot_s, "s");
    let mut notes = vec![
        "W counts every parameter, the input embedding table included, so the floor matches the \"with embeddings\" floor of a catalog prediction, not the stricter W_step one".to_string(),
        "no KV-cache reads and no per-step overheads (about 1.2 ms for a 32-layer model): real single-stream TPOT is higher".to_string(),
        "KV capacity, prefill and TTFT need a model shape: give --model or --hf-config and a catalog --gpu".to_string(),
    ];
    if hw.mbu_assumed {
        notes.push(format!(
            "MBU {} is an assumed, uncalibrated default",
            hw.mbu
        ));
    }
    Ok(RawPrediction {
        hardware: hw.clone(),
        weights,
        floor,
        max_tokens_per_s,
        expected_tpot,
        expected_tokens_per_s,
        notes,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn hw() -> RawHardware {
        RawHardware {
            source: "--bandwidth-gbs".into(),
            peak_bandwidth: 600e9,
            mbu: 0.75,
            mbu_assumed: true,
            params: 8e9,
            bytes_per_param: 2.0,
            tensor_parallel_size: 1,
        }
    }

    #[test]
    fn sixteen_gigabytes_over_600_gbs() {
        let p = predict_raw(&hw()).unwrap();
        assert_eq!(p.weights.value, 16e9);
        // 16 GB / 600 GB/s = 26.67 ms; at MBU 0.75 35.6 ms.
        assert!(
            (p.floor.value - 0.026_666_7).abs() < 1e-6,
            "{}",
            p.floor.value
        );
        assert!((p.max_tokens_per_s.value - 37.5).abs() < 1e-9);
        assert!((p.expected_tpot.value - 0.035_555_6).abs() < 1e-6);
        assert!(p.notes.iter().any(|n| n.contains("assumed")));
        assert_eq!(p.floor.formula, "W / peak_BW");
    }

    #[test]
    fn tensor_parallelism_splits_the_weights() {
        let mut h = hw();
        h.tensor_parallel_size = 2;
        let p = predict_raw(&h).unwrap();
        assert_eq!(p.weights.value, 8e9);
        assert!((p.floor.value - 8e9 / 600e9).abs() < 1e-12);
    }

    #[test]
    fn nonsense_inputs_are_rejected() {
        let mut h = hw();
        h.params = 0.0;
        assert!(predict_raw(&h).unwrap_err().to_string().contains("params"));
        let mut h = hw();
        h.mbu = 1.5;
        assert!(predict_raw(&h).unwrap_err().to_string().contains("mbu"));
        let mut h = hw();
        h.peak_bandwidth = f64::NAN;
        assert!(predict_raw(&h).is_err());
    }
}
