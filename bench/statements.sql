SELECT catalog_entry_name FROM catalog_contents WHERE product_stock_number LIKE "2%";	spider train_gold.sql:328
SELECT avg(age) ,  sex FROM Student GROUP BY sex;	spider train_gold.sql:497
SELECT T1.customer_id ,  T2.customer_first_name ,  T2.customer_last_name FROM Customers_cards AS T1 JOIN Customers AS T2 ON T1.customer_id  =  T2.customer_id GROUP BY T1.customer_id ORDER BY count(*) ASC LIMIT 1;	spider train_gold.sql:718
SELECT max(Milliseconds) ,  min(Milliseconds) FROM TRACK;	spider train_gold.sql:1396
SELECT t2.service_name FROM first_notification_of_loss AS t1 JOIN services AS t2 ON t1.service_id  =  t2.service_id GROUP BY t1.service_id HAVING count(*)  >  2;	spider train_gold.sql:1468
SELECT DISTINCT t3.paperid FROM venue AS t4 JOIN paper AS t3 ON t4.venueid  =  t3.venueid JOIN writes AS t2 ON t2.paperid  =  t3.paperid JOIN author AS t1 ON t2.authorid  =  t1.authorid WHERE t1.authorname  =  "Richard Ladner" AND t4.venuename  =  "chi";	spider train_gold.sql:2070
SELECT DISTINCT t3.title FROM paperkeyphrase AS t2 JOIN keyphrase AS t5 ON t2.keyphraseid  =  t5.keyphraseid JOIN writes AS t4 ON t4.paperid  =  t2.paperid JOIN paper AS t3 ON t4.paperid  =  t3.paperid JOIN author AS t1 ON t4.authorid  =  t1.authorid WHERE t1.authorname LIKE "Ranjit Jhala" AND t5.keyphrasename  =  "Liquid Haskell";	spider train_gold.sql:2243
SELECT count(*) FROM gas_station WHERE open_year BETWEEN 2000 AND 2005;	spider train_gold.sql:3150
SELECT manager_name FROM gas_station WHERE open_year  >  2000 GROUP BY manager_name ORDER BY count(*) DESC LIMIT 1;	spider train_gold.sql:3165
SELECT Investor FROM entrepreneur WHERE Money_Requested  >  140000 INTERSECT SELECT Investor FROM entrepreneur WHERE Money_Requested  <  120000;	spider train_gold.sql:3431
SELECT T2.title ,  T2.director FROM Rating AS T1 JOIN Movie AS T2 ON T1.mID  =  T2.mID WHERE T1.stars  >  (SELECT avg(T1.stars) FROM Rating AS T1 JOIN Movie AS T2 ON T1.mID  =  T2.mID WHERE T2.director  =  "James Cameron");	spider train_gold.sql:3715
SELECT roomName ,  basePrice FROM Rooms ORDER BY basePrice ASC LIMIT 1;	spider train_gold.sql:3837
SELECT Nationality FROM journalist WHERE Years_working  >  10 INTERSECT SELECT Nationality FROM journalist WHERE Years_working  <  3;	spider train_gold.sql:4055
SELECT count(*) FROM DEPARTMENT WHERE Division  =  "AS";	spider train_gold.sql:6069
SELECT product_type_code ,  avg(product_price) FROM products GROUP BY product_type_code;	spider train_gold.sql:6151
SELECT DISTINCT pName FROM Player WHERE pName LIKE '%a%';	spider train_gold.sql:6398
SELECT COUNT ( DISTINCT t3.title  ) FROM director AS t2 JOIN directed_by AS t1 ON t2.did  =  t1.did JOIN movie AS t3 ON t3.mid  =  t1.msid WHERE t2.name  =  "Quentin Tarantino" AND t3.release_year  >  2010;	spider train_gold.sql:6566
SELECT count(DISTINCT Software_Platform) FROM device;	spider train_gold.sql:6598
SELECT t3.house_number  ,  t1.name FROM restaurant AS t1 JOIN geographic AS t2 ON t1.city_name  =  t2.city_name JOIN LOCATION AS t3 ON t1.id  =  t3.restaurant_id WHERE t2.region  =  "bay area" AND t1.food_type  =  "american" AND t1.rating  =  ( SELECT MAX ( t1.rating ) FROM restaurant AS t1 JOIN geographic AS t2 ON t1.city_name  =  t2.city_name WHERE t2.region  =  "bay area" AND t1.food_type  =  "american" );	spider train_gold.sql:7425
SELECT T1.sales_details ,  T2.date_of_transaction FROM SALES AS T1 JOIN TRANSACTIONS AS T2 ON T1.sales_transaction_id  =  T2.transaction_id WHERE T2.amount_of_transaction  <  3000;	spider train_gold.sql:7523
SELECT T1.city FROM city AS T1 JOIN temperature AS T2 ON T1.city_id  =  T2.city_id WHERE T2.Mar  <  T2.Jul OR T2.Mar  >  T2.Oct;	spider train_gold.sql:7948
SELECT count(*) FROM services;	spider train_gold.sql:7986
SELECT T2.budget_type_code ,  T2.budget_type_description ,  T1.document_id FROM Documents_with_expenses AS T1 JOIN Ref_budget_codes AS T2 ON T1.budget_type_code  =  T2.budget_type_code;	spider train_gold.sql:8110
SELECT count(*) FROM Staff WHERE first_name = "Ludie";	spider train_gold.sql:8297
WITH recent AS (SELECT id, name FROM orders WHERE created_at >= '2024-01-01') SELECT r.name, count(*) AS n FROM recent AS r LEFT JOIN items AS i ON i.order_id = r.id GROUP BY r.name HAVING count(*) > 1 ORDER BY n DESC;	hand-written
SELECT name FROM employees WHERE dept_id IN (SELECT id FROM departments WHERE budget > 1e6) AND NOT EXISTS (SELECT 1 FROM leaves WHERE leaves.emp_id = employees.id);	hand-written
SELECT 'it''s', "quoted name", x'0aff', -3.5e-2 FROM notes WHERE body LIKE '%50\%%' ESCAPE '\' AND city = 'Zürich';	hand-written
SELECT CASE WHEN salary > 1000 THEN 'high' WHEN salary > 500 THEN 'mid' ELSE 'low' END AS band, CAST(salary AS INTEGER) FROM employees;	hand-written
SELECT dept, rank() OVER (PARTITION BY dept ORDER BY salary DESC) AS r FROM employees;	hand-written
INSERT INTO orders (id, customer, total) VALUES (1, 'Ann', 10.5), (2, 'Bob', NULL);	hand-written
UPDATE employees SET salary = salary * 1.1 WHERE dept = 'R&D' AND hired < date('now', '-5 years');	hand-written
DELETE FROM sessions /* stale */ WHERE last_seen < strftime('%s', 'now') - 3600 RETURNING id;	hand-written
SELECT a.name, b.name FROM (SELECT * FROM t1) AS a NATURAL JOIN t2 b UNION ALL SELECT name, NULL FROM t3 LIMIT 10 OFFSET 5;	hand-written
