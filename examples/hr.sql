-- The HR example database: the policy examples (paper §7.1) and the `gridrail ask` demo
-- (examples/hr.sqlite is this script, executed; tests/test_examples.py keeps the two equal).
-- `salaries` exists but the analyst role does not see it.
CREATE TABLE employees (id INTEGER PRIMARY KEY, name TEXT NOT NULL, dept TEXT, salary REAL, manager_id INTEGER);
CREATE TABLE employees_public (id INTEGER PRIMARY KEY, name TEXT, dept TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, employee_id INTEGER, total REAL, placed_on TEXT);
CREATE TABLE salaries (employee_id INTEGER, amount REAL, since TEXT);
INSERT INTO employees VALUES
  (1, 'Ada', 'eng', 120000, NULL), (2, 'Bob', 'ops', 90000, 1), (3, 'Chen', 'eng', 105000, 1),
  (4, 'Dana', 'sales', 70000, 1), (5, 'Eve', 'sales', 72000, 4), (6, 'Farid', 'ops', 65000, 2),
  (7, 'Grace', 'eng', 98000, 3), (8, 'Hugo', 'sales', 61000, 4);
INSERT INTO employees_public VALUES
  (1, 'Ada', 'eng'), (2, 'Bob', 'ops'), (3, 'Chen', 'eng'), (4, 'Dana', 'sales'),
  (5, 'Eve', 'sales'), (6, 'Farid', 'ops'), (7, 'Grace', 'eng'), (8, 'Hugo', 'sales');
INSERT INTO orders VALUES
  (1, 2, 19.5, '2026-01-03'), (2, 1, 250.0, '2026-02-11'), (3, 4, 1200.0, '2026-02-14'),
  (4, 5, 880.0, '2026-03-01'), (5, 4, 430.25, '2026-03-09'), (6, 8, 99.9, '2026-03-20'),
  (7, 5, 1500.0, '2026-04-02'), (8, 6, 42.0, '2026-04-18');
INSERT INTO salaries VALUES
  (1, 120000, '2024-01-01'), (2, 90000, '2025-06-01'), (3, 105000, '2025-01-01'),
  (4, 70000, '2023-09-01'), (5, 72000, '2025-03-01'), (6, 65000, '2024-07-01'),
  (7, 98000, '2025-02-01'), (8, 61000, '2026-01-01');
