//! The Hugging Face datasets vLLM's `hf` dataset knows by name, and what servebench reads of
//! each: which columns make the prompt and the output length.

/// How a known dataset's rows become prompts (one kind per vLLM dataset class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HfKind {
    /// ShareGPT-style chats: `conversations[0].value` is the prompt and
    /// `conversations[1].value`'s tokens the output length; rows with fewer than two turns
    /// are skipped, and with the dataset's lengths, vLLM's ShareGPT bounds apply.
    Conversation,
    /// InstructCoder: `input`, a blank line, `instruction` and vLLM's request for code only;
    /// 200 output tokens by default.
    InstructCoder,
    /// MT-Bench, first turn only: `turns[0]`; 256 output tokens by default.
    MtBench,
    /// AIMO / NuminaMath: `problem` is the prompt, `solution`'s tokens the output length;
    /// prompts of 4–2048 tokens and totals up to 32000.
    Aimo,
}

impl HfKind {
    /// The name users know it by.
    pub fn label(self) -> &'static str {
        match self {
            HfKind::Conversation => "ShareGPT-style conversations",
            HfKind::InstructCoder => "InstructCoder",
            HfKind::MtBench => "MT-Bench",
            HfKind::Aimo => "AIMO",
        }
    }

    /// The split vLLM reads: fixed to `train` for all but the conversation datasets, which
    /// take `--hf-split`.
    pub fn fixed_split(self) -> Option<&'static str> {
        match self {
            HfKind::Conversation => None,
            _ => Some("train"),
        }
    }

    /// The subset vLLM reads: `--hf-subset` for conversations and InstructCoder and
    /// MT-Bench, none for AIMO.
    pub fn takes_subset(self) -> bool {
        !matches!(self, HfKind::Aimo)
    }
}

/// Dataset ids servebench reads, with their kind (vLLM's `SUPPORTED_DATASET_PATHS`).
pub const SUPPORTED: &[(&str, HfKind)] = &[
    ("Aeala/ShareGPT_Vicuna_unfiltered", HfKind::Conversation),
    ("likaixin/InstructCoder", HfKind::InstructCoder),
    ("philschmid/mt-bench", HfKind::MtBench),
    ("AI-MO/aimo-validation-aime", HfKind::Aimo),
    ("AI-MO/NuminaMath-1.5", HfKind::Aimo),
    ("AI-MO/NuminaMath-CoT", HfKind::Aimo),
];

/// Dataset ids vLLM knows that servebench does not read, and why.
pub const UNSUPPORTED: &[(&str, &str)] = &[
    ("lmms-lab/LLaVA-OneVision-Data", "multimodal (images)"),
    ("lmarena-ai/VisionArena-Chat", "multimodal (images)"),
    ("lmarena-ai/vision-arena-bench-v0.1", "multimodal (images)"),
    ("yale-nlp/MMVU", "multimodal (video)"),
    ("Lin-Chen/MMStar", "multimodal (images)"),
    ("openslr/librispeech_asr", "audio transcription"),
    ("facebook/voxpopuli", "audio transcription"),
    ("LIUM/tedlium", "audio transcription"),
    ("edinburghcstr/ami", "audio transcription"),
    ("speechcolab/gigaspeech", "audio transcription"),
    ("kensho/spgispeech", "audio transcription"),
    ("vdaita/edit_5k_char", "the Blazedit prompt template"),
    ("vdaita/edit_10k_char", "the Blazedit prompt template"),
    (
        "zed-industries/zeta",
        "the next-edit prediction prompt template",
    ),
    (
        "mgoin/mlperf-inference-llama2-data",
        "client-side system-prompt chat templates",
    ),
    (
        "mgoin/mlperf-inference-llama3.1-data",
        "client-side system-prompt chat templates",
    ),
];

/// What a dataset id is to servebench.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    /// Read with this kind.
    Supported(HfKind),
    /// Known to vLLM, not read here, for this reason.
    Unsupported(&'static str),
    /// Not a dataset vLLM's `hf` knows.
    Unknown,
}

/// Looks an id up (exact, as vLLM compares).
pub fn lookup(id: &str) -> Known {
    if let Some((_, kind)) = SUPPORTED.iter().find(|(name, _)| *name == id) {
        return Known::Supported(*kind);
    }
    if let Some((_, why)) = UNSUPPORTED.iter().find(|(name, _)| *name == id) {
        return Known::Unsupported(why);
    }
    Known::Unknown
}

/// The supported ids, for messages.
pub fn supported_list() -> String {
    SUPPORTED
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_matched_exactly() {
        assert_eq!(
            lookup("likaixin/InstructCoder"),
            Known::Supported(HfKind::InstructCoder)
        );
        assert_eq!(lookup("likaixin/instructcoder"), Known::Unknown);
        assert!(matches!(lookup("yale-nlp/MMVU"), Known::Unsupported(_)));
        assert!(supported_list().contains("philschmid/mt-bench"));
    }
}
