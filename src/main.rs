//! The `switchboard` binary: parse the command line and run it.

use clap::Parser;

fn main() -> std::process::ExitCode {
    limit_malloc_arenas();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_or_else(
            |err| {
                eprintln!("switchboard: starting the async runtime: {err}");
                std::process::ExitCode::FAILURE
            },
            |runtime| runtime.block_on(run()),
        )
}

/// glibc's malloc gives each thread that allocates an arena of its own, up
/// to eight per core; the gateway's threads (the runtime's workers, its
/// blocking pool, one per SQLite connection) each kept a few hundred KiB to
/// MiBs of freed memory in theirs. Two arenas serve a load that is mostly
/// short allocations on the runtime's workers; `MALLOC_ARENA_MAX` in the
/// environment still wins.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; called before
        // any other thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

async fn run() -> std::process::ExitCode {
    let cli = switchboard::cli::Cli::parse();
    match switchboard::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("switchboard: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
