//! The `spate` command line.

#![deny(unsafe_code)]

use clap::{Parser, Subcommand};
use spate::config::{self, Config};
use spate::server::prepare::prepare;
use spate::server::Server;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// spate: a web server and reverse proxy configured in h2o's YAML dialect.
#[derive(Parser)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Cli {
    /// The configuration file (h2o-style YAML).
    #[arg(short = 'c', long = "conf", value_name = "FILE")]
    conf: Option<PathBuf>,
    /// Check the configuration and exit: 0 when valid, else every problem as FILE:LINE.
    #[arg(short = 't', long = "test", requires = "conf")]
    test: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a directory with no configuration file (index files, directory listings).
    Serve {
        /// The directory to serve.
        dir: PathBuf,
        /// Where to listen.
        #[arg(short, long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Worker threads (default: one per CPU).
        #[arg(long)]
        threads: Option<usize>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match (&cli.command, &cli.conf) {
        (
            Some(Command::Serve {
                dir,
                listen,
                threads,
            }),
            _,
        ) => {
            if !dir.is_dir() {
                eprintln!("spate: {} is not a directory", dir.display());
                return ExitCode::from(2);
            }
            let mut c = Config::serve_dir(dir, *listen);
            if let Some(n) = threads {
                c.num_threads = (*n).max(1);
            }
            c
        }
        // The same checks for `-t` and a start: the file read, then made into what serving
        // needs (keys, TLS clients, the account).
        (None, Some(path)) => match config::load_file(path) {
            Ok(c) => c,
            Err(errors) => return config_errors(path, &errors),
        },
        (None, None) => {
            eprintln!("spate: give a configuration with -c FILE, or `spate serve DIR`; see --help");
            return ExitCode::from(2);
        }
    };
    let prepared = match prepare(&config) {
        Ok(p) => p,
        Err(errors) => {
            let path = cli.conf.as_deref().unwrap_or(Path::new("<command line>"));
            return config_errors(path, &errors);
        }
    };
    if cli.test {
        // A start logs them once logging is set up.
        for w in &config.warnings {
            eprintln!("{}: warning: {}", w.at, w.message);
        }
        if let Some(path) = &cli.conf {
            println!("{}: configuration is OK", path.display());
        }
        return ExitCode::SUCCESS;
    }
    if let Err(e) = init_logging(&config) {
        eprintln!("spate: {e}");
        return ExitCode::from(1);
    }
    for w in &config.warnings {
        tracing::warn!("{}: {}", w.at, w.message);
    }
    let mut server = match Server::bind(config, prepared) {
        Ok(s) => match &cli.conf {
            Some(path) if cli.command.is_none() => s.reload_from(path.clone()),
            _ => s,
        },
        Err(e) => {
            eprintln!("spate: {e}");
            return ExitCode::from(1);
        }
    };
    let _pid_file = match server.settle() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("spate: {e}");
            return ExitCode::from(1);
        }
    };
    {
        // One write for all the lines, so that a reader of the pipe gets them together.
        let lines: String = server
            .urls()
            .map(|url| format!("spate listening on {url}\n"))
            .collect();
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(lines.as_bytes());
        let _ = out.flush();
    }
    match server.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("spate: {e}");
            ExitCode::from(1)
        }
    }
}

/// Every problem of the configuration at `path`, then how many: the exit status is 1.
fn config_errors(path: &Path, errors: &[config::ConfigError]) -> ExitCode {
    for e in errors {
        eprintln!("{e}");
    }
    eprintln!("spate: {} error(s) in {}", errors.len(), path.display());
    ExitCode::from(1)
}

/// Diagnostics go to `error-log` when configured, else to standard error; `RUST_LOG` filters.
fn init_logging(config: &Config) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match &config.error_log {
        Some(path) => {
            // Reopened on SIGUSR1 (logrotate).
            let writer = spate::log::reopen::ErrorLog::open(path)?;
            builder.with_ansi(false).with_writer(writer).init();
        }
        None => builder.with_writer(std::io::stderr).init(),
    }
    Ok(())
}
