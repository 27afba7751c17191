//! Engine-side metric state (docs/simulator.md §6). The core updates it; the server renders it.

/// A Prometheus-style histogram: per-bucket counts (not cumulative) for `bounds`, plus +Inf.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    pub bounds: Vec<f64>,
    /// `bounds.len() + 1` entries; the last is the +Inf bucket.
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    pub fn new(bounds: Vec<f64>) -> Self {
        let n = bounds.len() + 1;
        Histogram {
            bounds,
            counts: vec![0; n],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, v: f64) {
        let i = self.bounds.partition_point(|b| *b < v);
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }
}

/// Every series of docs/simulator.md §6 (the `sim:` extras included).
#[derive(Debug, Clone)]
pub struct EngineMetrics {
    pub num_requests_running: u64,
    pub num_requests_waiting: u64,
    pub kv_cache_usage_perc: f64,
    pub prefix_cache_queries_total: u64,
    pub prefix_cache_hits_total: u64,
    pub num_preemptions_total: u64,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
    pub request_success_stop: u64,
    pub request_success_length: u64,
    pub request_success_abort: u64,
    pub iteration_tokens: Histogram,
    pub time_to_first_token: Histogram,
    pub inter_token_latency: Histogram,
    pub request_time_per_output_token: Histogram,
    pub e2e_request_latency: Histogram,
    pub request_queue_time: Histogram,
    pub request_prefill_time: Histogram,
    pub request_decode_time: Histogram,
    pub request_inference_time: Histogram,
    pub request_prompt_tokens: Histogram,
    pub request_generation_tokens: Histogram,
    pub request_max_num_generation_tokens: Histogram,
    pub request_params_max_tokens: Histogram,
    pub request_params_n: Histogram,
    // sim: extras
    pub step_duration: Histogram,
    pub inter_token_latency_fine: Histogram,
    pub step_scheduled_tokens: Histogram,
    pub preempted_prefix_queries_total: u64,
    pub preempted_prefix_hits_total: u64,
    pub steps_total: u64,
    /// `vllm:spec_decode_*` counters, present only with speculative decoding (as vLLM
    /// registers them only then).
    pub spec_decode: Option<super::SpecDecodeMetrics>,
}

fn one_two_five(max: u32) -> Vec<f64> {
    let mut out = Vec::new();
    let mut decade = 1u64;
    'outer: loop {
        for m in [1u64, 2, 5] {
            let v = m * decade;
            if v > u64::from(max) {
                break 'outer;
            }
            out.push(v as f64);
        }
        decade *= 10;
    }
    out
}

impl EngineMetrics {
    pub fn new(max_model_len: u32) -> Self {
        let ttft = vec![
            0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
        ];
        let itl = vec![
            0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0, 20.0, 40.0, 80.0,
        ];
        let req = vec![
            0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
            120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
        ];
        let iter = vec![
            1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
            16384.0,
        ];
        let fine = vec![
            0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.2,
            0.5, 1.0,
        ];
        let tokens = one_two_five(max_model_len);
        EngineMetrics {
            num_requests_running: 0,
            num_requests_waiting: 0,
            kv_cache_usage_perc: 0.0,
            prefix_cache_queries_total: 0,
            prefix_cache_hits_total: 0,
            num_preemptions_total: 0,
            prompt_tokens_total: 0,
            generation_tokens_total: 0,
            request_success_stop: 0,
            request_success_length: 0,
            request_success_abort: 0,
            iteration_tokens: Histogram::new(iter.clone()),
            time_to_first_token: Histogram::new(ttft),
            inter_token_latency: Histogram::new(itl.clone()),
            request_time_per_output_token: Histogram::new(itl),
            e2e_request_latency: Histogram::new(req.clone()),
            request_queue_time: Histogram::new(req.clone()),
            request_prefill_time: Histogram::new(req.clone()),
            request_decode_time: Histogram::new(req.clone()),
            request_inference_time: Histogram::new(req),
            request_prompt_tokens: Histogram::new(tokens.clone()),
            request_generation_tokens: Histogram::new(tokens.clone()),
            request_max_num_generation_tokens: Histogram::new(tokens.clone()),
            request_params_max_tokens: Histogram::new(tokens),
            request_params_n: Histogram::new(vec![1.0, 2.0, 5.0, 10.0, 20.0]),
            step_duration: Histogram::new(fine.clone()),
            inter_token_latency_fine: Histogram::new(fine),
            step_scheduled_tokens: Histogram::new(iter),
            preempted_prefix_queries_total: 0,
            preempted_prefix_hits_total: 0,
            steps_total: 0,
            spec_decode: None,
        }
    }
}
