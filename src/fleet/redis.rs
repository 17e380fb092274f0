//! `--state redis://…`: holds shared through Redis (being written).
