-- The HR example database of the policy examples (paper §7.1): `salaries` exists but the
-- analyst role does not see it.
CREATE TABLE employees (id INTEGER PRIMARY KEY, name TEXT NOT NULL, dept TEXT, salary REAL, manager_id INTEGER);
CREATE TABLE employees_public (id INTEGER PRIMARY KEY, name TEXT, dept TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, employee_id INTEGER, total REAL, placed_on TEXT);
CREATE TABLE salaries (employee_id INTEGER, amount REAL, since TEXT);
INSERT INTO employees VALUES (1, 'Ada', 'eng', 120000, NULL), (2, 'Bob', 'ops', 90000, 1);
INSERT INTO employees_public VALUES (1, 'Ada', 'eng'), (2, 'Bob', 'ops');
INSERT INTO orders VALUES (1, 2, 19.5, '2026-01-03'), (2, 1, 250.0, '2026-02-11');
INSERT INTO salaries VALUES (1, 120000, '2024-01-01'), (2, 90000, '2025-06-01');
