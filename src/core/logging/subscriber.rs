//! The installed `tracing` subscriber: a `Registry` with two reloadable
//! layers, the level filter ([`Levels`]) and the `fmt` layer that writes
//! Triton's lines to the [`Sink`] (stderr or the log file).

use std::fs::File;
use std::io;
use std::sync::{Arc, OnceLock};

use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::fmt::format::DefaultFields;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, Layer, Layered, SubscriberExt};
use tracing_subscriber::{reload, Registry};

use super::format::{Format, TritonFormat};

type Base = Layered<reload::Layer<Levels, Registry>, Registry>;
type Lines = tracing_subscriber::fmt::Layer<Base, DefaultFields, TritonFormat, Sink>;

/// The handles of the installed subscriber's two reloadable layers.
pub(super) struct Installed {
    levels: reload::Handle<Levels, Registry>,
    lines: reload::Handle<Lines, Base>,
}

static INSTALLED: OnceLock<Option<Installed>> = OnceLock::new();

/// The subscriber, installed as the global default on first use unless
/// another one was installed first (`None` then).
/// `settings` gives the stored settings when it installs.
pub(super) fn installed(
    settings: impl FnOnce() -> (Levels, Format, Sink),
) -> Option<&'static Installed> {
    INSTALLED.get_or_init(|| install(settings())).as_ref()
}

fn install((levels, format, sink): (Levels, Format, Sink)) -> Option<Installed> {
    let (levels, levels_handle) = reload::Layer::new(levels);
    let (lines, lines_handle) = reload::Layer::new(lines_layer(format, sink));
    let subscriber = Registry::default().with(levels).with(lines);
    tracing::subscriber::set_global_default(subscriber).ok()?;
    Some(Installed {
        levels: levels_handle,
        lines: lines_handle,
    })
}

fn lines_layer(format: Format, sink: Sink) -> Lines {
    tracing_subscriber::fmt::Layer::default()
        .event_format(TritonFormat::new(format))
        .with_writer(sink)
}

/// Brings the subscriber in line with the stored settings (the caller holds
/// `CONFIG`).
pub(super) fn apply((levels, format, sink): (Levels, Format, Sink)) {
    // Not installed yet: it installs with the settings stored then.
    if let Some(Some(installed)) = INSTALLED.get() {
        let _ = installed.levels.reload(levels);
        let _ = installed.lines.reload(lines_layer(format, sink));
    }
}

/// The level filter: which of Triton's levels are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Levels {
    pub(super) info: bool,
    pub(super) warning: bool,
    pub(super) error: bool,
    pub(super) verbose: u32,
}

impl Levels {
    fn allows(&self, level: &Level) -> bool {
        match *level {
            Level::ERROR => self.error,
            Level::WARN => self.warning,
            Level::INFO => self.info,
            Level::DEBUG => self.verbose >= 1,
            _ => self.verbose >= 2,
        }
    }

    fn passes(&self, metadata: &Metadata<'_>) -> bool {
        let target = metadata.target();
        let ours = target == "trtis" || target.starts_with("trtis::");
        ours && self.allows(metadata.level())
    }

    /// The most verbose level that passes.
    fn max(&self) -> LevelFilter {
        [
            (Level::TRACE, LevelFilter::TRACE),
            (Level::DEBUG, LevelFilter::DEBUG),
            (Level::INFO, LevelFilter::INFO),
            (Level::WARN, LevelFilter::WARN),
            (Level::ERROR, LevelFilter::ERROR),
        ]
        .into_iter()
        .find(|(level, _)| self.allows(level))
        .map_or(LevelFilter::OFF, |(_, filter)| filter)
    }
}

impl<S: Subscriber> Layer<S> for Levels {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if self.passes(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, _: Context<'_, S>) -> bool {
        self.passes(metadata)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.max())
    }
}

/// Where the `fmt` layer writes: stderr, or the log file (opened to append;
/// each line is one `write`).
#[derive(Debug, Clone)]
pub(super) enum Sink {
    Stderr,
    File(Arc<File>),
}

impl<'a> MakeWriter<'a> for Sink {
    type Writer = SinkWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        SinkWriter(self)
    }
}

/// One line's writer. Stderr is written directly (not with `eprint!`, which
/// panics when stderr is gone).
pub(super) struct SinkWriter<'a>(&'a Sink);

impl io::Write for SinkWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.0 {
            Sink::Stderr => io::stderr().lock().write(buf),
            Sink::File(file) => (&**file).write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self.0 {
            Sink::Stderr => io::stderr().lock().write_all(buf),
            Sink::File(file) => (&**file).write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.0 {
            Sink::Stderr => io::stderr().flush(),
            Sink::File(file) => (&**file).flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_filter() {
        let all = Levels {
            info: true,
            warning: true,
            error: true,
            verbose: 0,
        };
        assert!(all.allows(&Level::INFO) && !all.allows(&Level::DEBUG));
        assert_eq!(all.max(), LevelFilter::INFO);
        let loud = Levels { verbose: 2, ..all };
        assert!(loud.allows(&Level::TRACE));
        assert_eq!(loud.max(), LevelFilter::TRACE);
        let one = Levels { verbose: 1, ..all };
        assert!(one.allows(&Level::DEBUG) && !one.allows(&Level::TRACE));
        let quiet = Levels {
            info: false,
            verbose: 0,
            ..all
        };
        assert!(!quiet.allows(&Level::INFO) && quiet.allows(&Level::WARN));
        assert_eq!(quiet.max(), LevelFilter::WARN);
        let off = Levels {
            info: false,
            warning: false,
            error: false,
            verbose: 0,
        };
        assert_eq!(off.max(), LevelFilter::OFF);
    }
}
