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
    /// VisionArena: the first user turn's `content` (`conversation[0][0]` in VisionArena-Chat,
    /// `turns[0][0]` in vision-arena-bench) and the row's first image; 128 output tokens.
    VisionArena,
    /// LLaVA-OneVision: ShareGPT-style `conversations` as [`HfKind::Conversation`], with the
    /// row's `image` (when it has one) in the message.
    MultiModalConversation,
    /// HumanEval: `prompt`; 256 output tokens; its only split is `test`.
    HumanEval,
    /// GSM8K: `question`; 256 output tokens.
    Gsm8k,
    /// Blazedit: `code` and `change_request` in the Blazedit edit template, rows whose
    /// `norm_distance` lies in [--blazedit-min-distance, --blazedit-max-distance]; 4000 output
    /// tokens.
    Blazedit,
}

impl HfKind {
    /// The name users know it by.
    pub fn label(self) -> &'static str {
        match self {
            HfKind::Conversation => "ShareGPT-style conversations",
            HfKind::InstructCoder => "InstructCoder",
            HfKind::MtBench => "MT-Bench",
            HfKind::Aimo => "AIMO",
            HfKind::VisionArena => "VisionArena",
            HfKind::MultiModalConversation => "multimodal conversations",
            HfKind::HumanEval => "HumanEval",
            HfKind::Gsm8k => "GSM8K",
            HfKind::Blazedit => "Blazedit",
        }
    }

    /// The split vLLM reads: fixed to `train` for all but the conversation datasets, which
    /// take `--hf-split`.
    pub fn fixed_split(self) -> Option<&'static str> {
        match self {
            HfKind::Conversation
            | HfKind::MultiModalConversation
            | HfKind::VisionArena
            | HfKind::HumanEval
            | HfKind::Gsm8k
            | HfKind::Blazedit => None,
            _ => Some("train"),
        }
    }

    /// The split read when `--hf-split` is not given.
    pub fn default_split(self) -> &'static str {
        match self {
            HfKind::HumanEval => "test",
            _ => "train",
        }
    }

    /// The subset vLLM reads: `--hf-subset` for all but AIMO.
    pub fn takes_subset(self) -> bool {
        !matches!(self, HfKind::Aimo)
    }

    /// Whether its requests carry images (and so need a chat backend).
    pub fn has_images(self) -> bool {
        matches!(self, HfKind::VisionArena | HfKind::MultiModalConversation)
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
    ("lmarena-ai/VisionArena-Chat", HfKind::VisionArena),
    ("lmarena-ai/vision-arena-bench-v0.1", HfKind::VisionArena),
    (
        "lmms-lab/LLaVA-OneVision-Data",
        HfKind::MultiModalConversation,
    ),
    ("openai/openai_humaneval", HfKind::HumanEval),
    ("openai/gsm8k", HfKind::Gsm8k),
    ("vdaita/edit_5k_char", HfKind::Blazedit),
    ("vdaita/edit_10k_char", HfKind::Blazedit),
];

/// Dataset ids vLLM knows that servebench does not read, and why.
pub const UNSUPPORTED: &[(&str, &str)] = &[
    ("yale-nlp/MMVU", "multimodal (video)"),
    (
        "gorilla-llm/Berkeley-Function-Calling-Leaderboard",
        "tool-calling requests (each row's tools schema and chat history)",
    ),
    (
        "ArtificialAnalysis/Earnings22-Cleaned-AA",
        "audio transcription",
    ),
    (
        "D4nt3/esb-datasets-earnings22-validation-tiny-filtered",
        "audio transcription",
    ),
    ("Lin-Chen/MMStar", "multimodal (images)"),
    ("openslr/librispeech_asr", "audio transcription"),
    ("facebook/voxpopuli", "audio transcription"),
    ("LIUM/tedlium", "audio transcription"),
    ("edinburghcstr/ami", "audio transcription"),
    ("speechcolab/gigaspeech", "audio transcription"),
    ("kensho/spgispeech", "audio transcription"),
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
