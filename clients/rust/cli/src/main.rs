//! `redis-lock`: the redis-lock module's locks from the shell.
//! `redis-lock run KEY [--ttl 30s] [--wait 10s] [--url redis://…] -- command
//! args…` holds the lock while the command runs (see `args::USAGE`).

mod args;
mod run;

use args::Command;
use run::Exit;

fn main() {
    let exit = match args::parse(std::env::args_os().skip(1)) {
        Ok(Command::Help) => {
            print!("{}", args::USAGE);
            Exit::Command(0)
        }
        Ok(Command::Version) => {
            println!("redis-lock {}", env!("CARGO_PKG_VERSION"));
            Exit::Command(0)
        }
        Ok(Command::Run(run)) => match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime.block_on(run::run(run)),
            Err(e) => {
                eprintln!("redis-lock: cannot start: {e}");
                Exit::Unavailable
            }
        },
        Err(message) => {
            eprintln!("redis-lock: {message}\n\n{}", args::USAGE);
            Exit::Usage
        }
    };
    std::process::exit(exit.code());
}
