use std::process::ExitCode;

/// glibc's allocator holds on to memory freed by thousands of concurrent streams, so a long
/// run's resident memory crept up with the requests completed although the heap in use was
/// flat; mimalloc returns it (docs/benchmarks.md, Soak).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    servebench_cli::main()
}
