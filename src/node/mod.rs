//! Nodes: a recipe with `nodes:` runs the existing distributed engine — Ray plus vLLM
//! tensor parallel — across the Docker Engines of two Sparks linked by their ConnectX-7
//! ports. What runs where is planned (`plan`) and checked (`model`, `image`) before
//! anything starts, then created in order (`create`) and waited on until Ray has every
//! node (`start`, `ray`). Finding and stopping a group's containers again is
//! `runtime::group`'s: every command that stops a deployment stops its whole group.

pub(crate) mod create;
pub(crate) mod image;
pub(crate) mod model;
pub(crate) mod plan;
pub(crate) mod ray;
pub(crate) mod start;
