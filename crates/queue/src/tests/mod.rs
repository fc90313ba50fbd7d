//! Queue behaviour tests. Time only moves through `FakeClock`.

mod basics;
mod fakes;
mod hints;
mod ops;
mod prop;
