//! Warm sets and restore (`gc::warm::lab::...`: the lab group runs them one at a time).

mod lab;
