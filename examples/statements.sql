SELECT name FROM employees WHERE salary > 1000
SELECT T1.name, count(*) FROM employees AS T1 JOIN orders AS T2 ON T1.id = T2.employee_id GROUP BY T1.name
SELECT name FROM employees WHERE dept IN (SELECT id FROM departments WHERE budget > 10)
DELETE FROM orders WHERE id = 3
SELECT name FROM WHERE salary > 1000
SELECT count(DISTINCT dept FROM employees
