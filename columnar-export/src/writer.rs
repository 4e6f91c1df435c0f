//! One table's partition file: rows buffered per column, a row group every
//! [`ROW_GROUP_ROWS`] rows, so memory does not grow with the trace.

use crate::schema::{ColumnType, Table};
use crate::{ColumnarError, ROW_GROUP_ROWS, SCHEMA_VERSION};
use parquet::basic::{Compression, ZstdLevel};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{WriterProperties, WriterVersion};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::Type;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

/// One value of a row.
#[derive(Clone, Copy, Debug)]
pub enum Value<'a> {
    /// An integer.
    I(i64),
    /// A string.
    S(&'a str),
    /// A float.
    F(f64),
    /// A boolean.
    B(bool),
    /// Unknown (only in a nullable column).
    Null,
}

/// A column's buffered values; `defs` (nullable columns only) holds one
/// definition level per row, 1 for a value and 0 for a null.
enum Buffer {
    I(Vec<i64>),
    S(Vec<ByteArray>),
    F(Vec<f64>),
    B(Vec<bool>),
    OptI(Vec<i64>, Vec<i16>),
    OptF(Vec<f64>, Vec<i16>),
}

impl Buffer {
    fn new(ty: ColumnType) -> Buffer {
        match ty {
            ColumnType::Int64 => Buffer::I(Vec::new()),
            ColumnType::String => Buffer::S(Vec::new()),
            ColumnType::Float64 => Buffer::F(Vec::new()),
            ColumnType::Bool => Buffer::B(Vec::new()),
            ColumnType::OptInt64 => Buffer::OptI(Vec::new(), Vec::new()),
            ColumnType::OptFloat64 => Buffer::OptF(Vec::new(), Vec::new()),
        }
    }

    fn push(&mut self, v: Value<'_>) {
        match (self, v) {
            (Buffer::I(c), Value::I(x)) => c.push(x),
            (Buffer::S(c), Value::S(s)) => c.push(ByteArray::from(s)),
            (Buffer::F(c), Value::F(x)) => c.push(x),
            (Buffer::B(c), Value::B(x)) => c.push(x),
            (Buffer::OptI(c, d), Value::I(x)) => {
                c.push(x);
                d.push(1);
            }
            (Buffer::OptF(c, d), Value::F(x)) => {
                c.push(x);
                d.push(1);
            }
            (Buffer::OptI(_, d) | Buffer::OptF(_, d), Value::Null) => d.push(0),
            // A schema/row mismatch is a bug in this crate's table code.
            _ => unreachable!("row value does not match its column's type"),
        }
    }
}

fn schema(table: &Table) -> Type {
    use parquet::basic::{ConvertedType, LogicalType, Repetition, Type as Physical};
    let fields = table
        .all_columns()
        .map(|&(name, ty)| {
            let b = match ty {
                ColumnType::Int64 | ColumnType::OptInt64 => Type::primitive_type_builder(name, Physical::INT64),
                ColumnType::Float64 | ColumnType::OptFloat64 => Type::primitive_type_builder(name, Physical::DOUBLE),
                ColumnType::Bool => Type::primitive_type_builder(name, Physical::BOOLEAN),
                ColumnType::String => Type::primitive_type_builder(name, Physical::BYTE_ARRAY)
                    .with_logical_type(Some(LogicalType::String))
                    .with_converted_type(ConvertedType::UTF8),
            };
            let repetition = if ty.nullable() {
                Repetition::OPTIONAL
            } else {
                Repetition::REQUIRED
            };
            Arc::new(b.with_repetition(repetition).build().expect("static schema is valid"))
        })
        .collect();
    Type::group_type_builder("schema")
        .with_fields(fields)
        .build()
        .expect("static schema is valid")
}

/// Writes one table's partition file, a row group every [`ROW_GROUP_ROWS`] rows.
pub(crate) struct PartWriter {
    path: PathBuf,
    file: SerializedFileWriter<File>,
    buffers: Vec<Buffer>,
    rows: usize,
    total: u64,
}

impl PartWriter {
    /// Create `path` (and its directory) for `table`'s rows.
    pub(crate) fn create(path: PathBuf, table: &Table) -> Result<PartWriter, ColumnarError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| ColumnarError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let file = File::create(&path).map_err(|source| ColumnarError::Io {
            path: path.clone(),
            source,
        })?;
        let props = WriterProperties::builder()
            .set_writer_version(WriterVersion::PARQUET_1_0)
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_dictionary_enabled(true)
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .set_key_value_metadata(Some(vec![KeyValue::new(
                "gputrace.schema_version".to_string(),
                SCHEMA_VERSION.to_string(),
            )]))
            .set_created_by(format!("gputrace {}", env!("CARGO_PKG_VERSION")))
            .build();
        let file = SerializedFileWriter::new(file, Arc::new(schema(table)), Arc::new(props)).map_err(|source| ColumnarError::Parquet {
            path: path.clone(),
            source,
        })?;
        let buffers = table.all_columns().map(|&(_, ty)| Buffer::new(ty)).collect();
        Ok(PartWriter {
            path,
            file,
            buffers,
            rows: 0,
            total: 0,
        })
    }

    /// Append one row; `values` must match the table's columns in order and type.
    pub(crate) fn row(&mut self, values: &[Value<'_>]) -> Result<(), ColumnarError> {
        debug_assert_eq!(values.len(), self.buffers.len());
        for (b, v) in self.buffers.iter_mut().zip(values) {
            b.push(*v);
        }
        self.rows += 1;
        self.total += 1;
        if self.rows >= ROW_GROUP_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ColumnarError> {
        if self.rows == 0 {
            return Ok(());
        }
        let path = self.path.clone();
        let err = |source| ColumnarError::Parquet {
            path: path.clone(),
            source,
        };
        let mut rg = self.file.next_row_group().map_err(err)?;
        for b in &mut self.buffers {
            let mut col = rg.next_column().map_err(err)?.expect("one writer per schema column");
            match b {
                Buffer::I(c) => {
                    col.typed::<Int64Type>().write_batch(c, None, None).map_err(err)?;
                    c.clear();
                }
                Buffer::S(c) => {
                    col.typed::<ByteArrayType>().write_batch(c, None, None).map_err(err)?;
                    c.clear();
                }
                Buffer::F(c) => {
                    col.typed::<DoubleType>().write_batch(c, None, None).map_err(err)?;
                    c.clear();
                }
                Buffer::B(c) => {
                    col.typed::<BoolType>().write_batch(c, None, None).map_err(err)?;
                    c.clear();
                }
                Buffer::OptI(c, d) => {
                    col.typed::<Int64Type>().write_batch(c, Some(d), None).map_err(err)?;
                    c.clear();
                    d.clear();
                }
                Buffer::OptF(c, d) => {
                    col.typed::<DoubleType>().write_batch(c, Some(d), None).map_err(err)?;
                    c.clear();
                    d.clear();
                }
            }
            col.close().map_err(err)?;
        }
        rg.close().map_err(err)?;
        self.rows = 0;
        Ok(())
    }

    /// Write the last row group and the footer; returns the rows written.
    pub(crate) fn finish(mut self) -> Result<u64, ColumnarError> {
        self.flush()?;
        let path = self.path.clone();
        self.file.close().map_err(|source| ColumnarError::Parquet { path, source })?;
        Ok(self.total)
    }
}
