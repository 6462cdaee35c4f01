//! the SQLite selector table: schema, migrations, measurements, selections, nearest-shape fallback (being written).
