//! Bridge scenarios for bend/notice.bend (being written).
