use std::process::ExitCode;

fn main() -> ExitCode {
    servebench_cli::main()
}
