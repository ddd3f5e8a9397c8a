//! tsa-core's test suite, one binary (each binary links Burn, which is slow in release).

mod common;

mod checkpoint;
mod data;
mod gates;
mod generate;
mod metrics;
mod model;
mod resume;
mod skip_halted;
mod sparse;
mod train;
